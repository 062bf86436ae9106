"""A real MLflow tracking server for tests: ``mlflow server`` with a SQLite store on a free port.

Started once per test session (:func:`mlflow_server`), ready when it answers ``GET /health``, stopped
by the process group of the pid it was started as (``mlflow server`` runs uvicorn as a child); guarded by the
test process's watchdog (``watchdog.py``) meanwhile.
The server's own job runner (seven huey consumer processes, for MLflow's GenAI jobs) is switched off:
tracking metrics does not use it, and it would compete for the CI's two cores.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support import watchdog
from tests.support.ports import free_port


@dataclass(frozen=True)
class MlflowServer:
    url: str  # MLFLOW_TRACKING_URI for clients
    root: Path  # mlflow.db, artifacts/, server.log
    startup_s: float  # from launch to the first answer of /health
    pid: int  # ``mlflow server``, leader of its own process group (uvicorn is its child)


@contextmanager
def running_mlflow_server(root: Path, *, timeout: float = 120) -> Iterator[MlflowServer]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        f"sqlite:///{root / 'mlflow.db'}",
        "--default-artifact-root",
        str(root / "artifacts"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    log_path = root / "server.log"
    began = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        watchdog.guard(proc.pid)
        while not _answers(url):
            if proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            if time.monotonic() - began > timeout:
                raise TimeoutError(f"mlflow server did not answer in {timeout} s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.1)
        yield MlflowServer(url, root, time.monotonic() - began, proc.pid)
    finally:
        _stop(proc)
        watchdog.release(proc.pid)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group (its id is the server's pid: the server leads the session
    it was started in, and uvicorn is its child), SIGKILL to whatever is left after 15 s."""
    _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while _group_alive(proc) and time.monotonic() < deadline:
        time.sleep(0.1)
    _signal_group(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_alive(proc: subprocess.Popen[bytes]) -> bool:
    proc.poll()  # reap the leader once it exits, or it counts as a member forever
    try:
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        return False
    return True
