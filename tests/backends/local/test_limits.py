"""The local backend's limits, with real torchrun processes: ``limits.max_runtime`` stops a run as a limit (the
script gets SIGTERM first and checkpoints), and a cancel escalates to SIGKILL after the grace when a script
ignores SIGTERM, leaving no process of the run behind."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.local.processes import run_processes
from cloudddp.backends.status import Cause, RunState
from tests.support.cli import FIXTURES
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow
TINY = FIXTURES / "tinyjob" / "job.yaml"

STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ignoring SIGTERM from now on", flush=True)
while True:
    time.sleep(0.2)
"""


def test_max_runtime_stops_the_run_as_a_limit_after_sigterm_reached_the_script() -> None:
    job = Job.load(
        TINY, ["code.args=[--epochs, 1000, --sleep, 0.2]", "limits.max_runtime=45", "limits.max_recoveries=0"]
    )  # 45 s: with two suites on a 2-core machine, two ranks took over 10 s to import torch and set their handler
    started = time.monotonic()
    run = job.submit("local")
    status = run.wait(timeout=240, poll=0.5)
    took = time.monotonic() - started
    assert status.state is RunState.FAILED and status.cause is Cause.LIMIT, status
    assert "limits.max_runtime (45 s)" in status.message
    assert 45 <= took < 180, took  # stopped by the limit, not by the script finishing its 1000 epochs
    text = "\n".join(line.text for line in run.logs())
    assert "rank 0 stopping at epoch" in text, text[-2000:]  # SIGTERM reached the script: it left cleanly


def test_cancel_escalates_to_sigkill_after_the_grace_and_leaves_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "stubborn.py").write_text(STUBBORN)
    monkeypatch.setenv("CLOUDDDP_CANCEL_GRACE", "3")  # the supervisor is started with this environment
    job = Job.from_dict(
        {
            "name": "stubborn",
            "code": {"dir": ".", "entry": "stubborn.py"},
            "local": {"processes_per_node": 2},
            "checkpoint": {"enabled": False},
            "limits": {"max_recoveries": 0},
        },
        base_dir=tmp_path,
    )
    run = job.submit("local")
    wait_until(lambda: "ignoring SIGTERM" in "\n".join(line.text for line in run.logs()), timeout=60)
    assert len(run_processes(run.run_id)) >= 3  # torchrun's agent and both ranks
    asked = time.monotonic()
    assert run.cancel() is True
    status = run.wait(timeout=60, poll=0.2)
    took = time.monotonic() - asked
    assert status.state is RunState.CANCELLED, status
    assert 3 <= took < 30, took  # the grace was given, then SIGKILL ended what ignored SIGTERM
    assert run_processes(run.run_id) == []
    assert run.cancel() is False  # idempotent: the run had ended
