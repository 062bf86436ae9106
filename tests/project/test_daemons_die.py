"""Test daemons die with their test run: a pytest whose main process is killed (SIGKILL, SIGTERM) leaves none of
the rigs' daemons, and no training run it started, running 60 s later (tests/support/watchdog.py). The pytest is a
real one, run on tests/support/abandoned_session.py, which starts an MLflow server, Azurite, moto, the Slurm cluster
with a running job, sshd and a local run, then records every process they are."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.support import watchdog
from tests.support.abandoned_session import RECORD_VAR
from tests.support.cli import ROOT
from tests.support.rigs import rig_unavailable
from tests.support.waiting import wait_until

DEADLINE_S = 60
"""How long after the kill every process the session recorded must be gone."""

pytestmark = pytest.mark.slow


@pytest.mark.timeout(420)  # an MLflow server takes a minute to start on a loaded 2-core machine
@pytest.mark.parametrize(
    ("sig", "mode"),
    [
        pytest.param(signal.SIGKILL, ("-n", "1"), id="kill-9-of-the-main-process-whose-worker-started-them"),
        pytest.param(signal.SIGTERM, ("-p", "no:xdist"), id="sigterm-of-a-pytest-without-workers"),
    ],
)
def test_no_daemon_outlives_a_killed_pytest(tmp_path: Path, sig: signal.Signals, mode: tuple[str, ...]) -> None:
    _require_rigs()
    record_path, log = tmp_path / "record.json", tmp_path / "inner.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # not one of this run's workers
    env[RECORD_VAR] = str(record_path)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *mode, f"--basetemp={tmp_path / 'inner'}"]
    with log.open("wb") as out:
        inner = subprocess.Popen(
            [*argv, "tests/support/abandoned_session.py"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    record: dict[str, Any] = {}
    try:
        wait_until(lambda: record_path.exists() or inner.poll() is not None, timeout=240)
        if not record_path.exists():
            pytest.fail(f"the session ended ({inner.returncode}) before its daemons ran:\n{log.read_text()[-3000:]}")
        record = json.loads(record_path.read_text())
        processes = record["processes"]
        names = {name for _, _, name in processes}
        assert {"node", "munged", "slurmctld", "slurmd", "slurmstepd", "sleep", "sshd"} <= names, processes
        assert record["mlflow"] in [pid for pid, _, _ in processes], processes
        assert len(record["run"]) >= 5, record  # the supervisor, the store, the agent, its wrapper, the rank
        ports = [urlparse(url).port or 0 for url in (record["moto"], record["azurite"])]
        sockets = {port: _listening(port) for port in ports}  # the emulators' own listening sockets
        assert all(sockets.values()), sockets
        os.kill(inner.pid, sig)
        inner.wait(timeout=30)  # reaped at once, as the shell that started it would
        killed = time.monotonic()

        def still_listening() -> list[int]:
            """A socket still listening is a daemon alive, recorded or not (a process whose main thread is a zombie
            still holds its files until its last thread has left); the port itself may be taken anew by then."""
            return [port for port in ports if sockets[port] & _listening(port)]

        with suppress(TimeoutError):
            wait_until(lambda: not _survivors(processes) and not still_listening(), timeout=DEADLINE_S, poll=0.5)
        survivors = _survivors(processes)
        assert not survivors, (
            f"{len(survivors)} processes outlived the pytest killed {time.monotonic() - killed:.0f} s ago: "
            f"{survivors}\n{log.read_text()[-3000:]}"
        )
        assert not still_listening(), f"still listening on {still_listening()}: {record}"
        print(f"{len(processes)} processes gone {time.monotonic() - killed:.1f} s after the {sig.name}")
    finally:
        _clean_up(inner, record)


def _require_rigs() -> None:
    from tests.support.azure_rig import azurite_binary
    from tests.support.slurm_cluster import unavailable_reason

    if importlib.util.find_spec("mlflow") is None:
        rig_unavailable("mlflow is not installed (it is in the dev extra: pip install -e '.[dev]')")
    if azurite_binary() is None:
        rig_unavailable("Azurite is not installed: `make test` installs it with `npm install`")
    if reason := unavailable_reason():
        rig_unavailable(f"no Slurm cluster on this machine: {reason}")
    if shutil.which("sshd", path="/usr/sbin:/usr/bin") is None:
        rig_unavailable("OpenSSH is not installed (sshd): `make system-deps` installs openssh-server")


def _survivors(processes: list[list[Any]]) -> list[list[Any]]:
    return [p for p in processes if watchdog.alive((p[0], p[1]))]


def _listening(port: int) -> set[str]:
    """The inodes of the sockets listening on ``port`` (/proc/net/tcp and tcp6): a socket keeps its inode while
    it lives, and a new one gets a new inode, so one seen before and after the kill is the same socket."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                    found.add(fields[9])
    return found


def _clean_up(inner: subprocess.Popen[bytes], record: dict[str, Any]) -> None:
    """What the killed session left: the Slurm cluster's folder; after a failed check, the session and its
    recorded processes too, each by pid and start time."""
    if inner.poll() is None:
        inner.kill()
        inner.wait()
    for pid, _, _ in _survivors(record.get("processes", [])):
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for folder in record.get("folders", []):
        shutil.rmtree(folder, ignore_errors=True)
