"""A test session to be abandoned: it starts each kind of daemon the rigs start and a local training run, writes
down every process they are, then waits to be killed.

``tests/project/test_daemons_die.py`` runs it in a pytest of its own (its file name is no test module's, so only a
pytest that names it runs it), kills that pytest's main process, and checks that none of those processes outlives
the run. The environment says where the record goes (:data:`RECORD_VAR`), written whole once they all run:
``processes`` (``[pid, start time, name]`` of this test process, everything below it: the daemons, the watchdog;
of a Slurm job's processes, which ``slurmstepd`` takes out of slurmd's tree; and of the local run, whose supervisor
starts in a session of its own so that the run outlives the command that submitted it), ``run`` (the local run's
pids), ``mlflow`` (the server's pid),
``azurite`` and ``moto`` (their URLs) and ``folders`` (the Slurm cluster's, which a killed session leaves behind).

Its teardown is slower than pytest-xdist's execnet allows a worker whose main process is gone (it interrupts the
worker, then ends it 10 s later), as a loaded machine's teardown of these daemons can be (the MLflow server's stop
alone may take 15 s): the daemons' own stops never run, and the watchdog must do what they would have done.
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.support import watchdog
from tests.support.ssh_server import ssh_server
from tests.support.waiting import wait_until

RECORD_VAR = "CLOUDDDP_TEST_DAEMON_RECORD"
WAIT_S = 150
"""How long the session waits to be killed: longer than the killing test waits for the daemons to be gone."""
SLOW_TEARDOWN_S = 30
"""The test's own teardown, before the daemons' (see the module's docstring)."""


def test_daemons_until_killed(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    record: dict[str, Any] = {
        "mlflow": request.getfixturevalue("mlflow_server").pid,
        "azurite": request.getfixturevalue("blob_endpoint"),
        "moto": request.getfixturevalue("moto_url"),
    }
    cluster = request.getfixturevalue("slurm_cluster")
    record["folders"] = [str(cluster.root)]
    job_processes = _running_job(cluster, tmp_path)
    run_processes = _running_local_run(tmp_path / "run")
    record["run"] = sorted(run_processes)
    stack = ExitStack()
    request.addfinalizer(stack.close)
    stack.enter_context(ssh_server(tmp_path / "sshd", {"CLOUDDDP_TEST_SSHD": "1"}))
    request.addfinalizer(lambda: time.sleep(SLOW_TEARDOWN_S))
    pids = watchdog.with_descendants({os.getpid()} | job_processes | run_processes)
    record["processes"] = [[*found, _name(found[0])] for found in map(watchdog.identity, sorted(pids)) if found]
    path = Path(os.environ[RECORD_VAR])
    path.with_suffix(".part").write_text(json.dumps(record))
    path.with_suffix(".part").rename(path)
    time.sleep(WAIT_S)


def _running_job(cluster: Any, folder: Path) -> set[int]:
    """A job that sleeps on the cluster: its processes, once its ``sleep`` runs."""
    script = folder / "sleep.sh"
    script.write_text(f"#!/bin/bash\nsleep {WAIT_S * 2}\n")
    job = cluster.sbatch("--output", str(folder / "job.out"), str(script), cwd=folder)
    cluster.wait_job(job, {"RUNNING"})
    marker = f"SLURM_CONF={cluster.conf}"
    return wait_until(lambda: _with_sleep(watchdog.with_descendants(watchdog.pids_with_env(marker))), timeout=60)


def _running_local_run(folder: Path) -> set[int]:
    """A local run of a rank that sleeps: its processes once the rank runs (those that name the run in their
    environment, and its supervisor and rendezvous store, which name its folder on their command line)."""
    from cloudddp.api import Job
    from cloudddp.backends.local.processes import run_processes

    folder.mkdir()
    sleeper = [sys.executable, "-c", f"import time; time.sleep({WAIT_S * 2})"]
    job = {"name": "abandoned", "code": {"dir": str(folder), "command": sleeper}, "local": {"processes_per_node": 1}}
    run = Job.from_dict({**job, "checkpoint": {"enabled": False}}).submit("local")
    rank = " ".join(sleeper)
    wait_until(lambda: any(watchdog.cmdline(pid).startswith(rank) for pid in run_processes(run.run_id)), timeout=120)
    marked = watchdog.pids_with_env(f"{watchdog.MARK}={os.environ[watchdog.MARK]}")
    return set(run_processes(run.run_id)) | {pid for pid in marked if run.run_id in watchdog.cmdline(pid)}


def _with_sleep(pids: set[int]) -> set[int]:
    return pids if any(_name(pid) == "sleep" for pid in pids) else set()


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"
