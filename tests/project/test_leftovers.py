"""What a test leaves running is stopped at its end (tests/support/leftovers.py), ranks included: torchrun starts
each rank in a session of its own, so killing the supervisor's and the agents' groups left them training."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.local.processes import run_processes
from tests.support import watchdog
from tests.support.leftovers import stop_leftovers
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


@pytest.mark.timeout(180)
def test_a_running_local_run_is_stopped_with_its_ranks(tmp_path: Path, cloudddp_home: Path) -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    job = {"name": "left", "code": {"dir": str(tmp_path), "command": sleeper}, "local": {"processes_per_node": 2}}
    run = Job.from_dict({**job, "checkpoint": {"enabled": False}}).submit("local")
    rank = " ".join(sleeper)

    def ranks() -> list[int]:
        return [pid for pid in run_processes(run.run_id) if watchdog.cmdline(pid).startswith(rank)]

    wait_until(lambda: len(ranks()) == 2, timeout=120)
    stop_leftovers(cloudddp_home)
    wait_until(lambda: not run_processes(run.run_id), timeout=10)
