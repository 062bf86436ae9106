"""Faults injected into real local runs: a rank killed with SIGKILL, restarts used up."""

from __future__ import annotations

import os
import signal
import time

import pytest

from cloudddp.api import Job
from cloudddp.backends.status import RunState
from tests.support.cli import FIXTURES
from tests.support.faults import rank_processes, wait_for_rank

pytestmark = pytest.mark.slow
TINY = FIXTURES / "tinyjob" / "job.yaml"


def test_killed_rank_restarts_the_group_then_fails_fast_when_restarts_are_used_up() -> None:
    job = Job.load(TINY, ["code.args=[--epochs, 1000, --sleep, 0.3]", "limits.max_restarts=1"])
    run = job.submit("local")
    run_dir = run.status().details["run_dir"]
    next(run.metrics(follow=True))  # both ranks are training
    os.kill(wait_for_rank(run_dir, 1, attempt=0), signal.SIGKILL)
    # torchrun restarts the whole group: both ranks come back as attempt 1.
    wait_for_rank(run_dir, 0, attempt=1)
    pid = wait_for_rank(run_dir, 1, attempt=1)
    # Killed once it has joined the group and printed (a fixed 1 s let it be killed while still connecting, on a
    # busy machine: then its log had no line of this attempt to show).
    deadline = time.monotonic() + 60
    while sum("rank 1/2" in line.text for line in run.logs()) < 2:
        assert time.monotonic() < deadline, "rank 1 of the restarted group never printed"
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)

    killed_at = time.monotonic()
    status = run.wait(timeout=90, poll=0.2)
    assert status.state is RunState.FAILED
    assert time.monotonic() - killed_at < 60, "no hang: the surviving rank is stopped, not left waiting"
    failure = status.details["failure"]
    assert failure["rank"] == 1 and failure["exitcode"] == -signal.SIGKILL
    assert "rank 1" in status.message and "signal 9" in status.message
    assert any("rank 1/2" in line for line in failure["log_tail"]), failure["log_tail"]
    assert rank_processes(run_dir) == {}


def test_metric_lines_no_parser_can_hold_are_skipped_with_a_warning_and_the_run_finishes() -> None:
    """A 400-digit number (OverflowError) and nesting deeper than the decoder goes (RecursionError), printed
    before the first epoch: each is one warning, and every later line still reaches the log and the metrics."""
    run = Job.load(TINY, ["code.args=[--epochs, 2, --bad-metrics]"]).submit("local")
    status = run.wait(timeout=90, poll=0.2)
    assert status.state is RunState.SUCCEEDED, status
    assert [r.epoch for r in run.metrics()] == [1, 2]
    warned = [line.text for line in run.logs() if "a metric line was skipped" in line.text]
    assert len(warned) == 2 and "does not fit a float" in warned[0] and "RecursionError" in warned[1], warned
