"""Faults injected into real local runs: a rank killed with SIGKILL, restarts used up."""

from __future__ import annotations

import os
import signal
import time

import pytest

from cloudddp.api import Job
from cloudddp.backends.base import RunState
from cloudddp.backends.local.outcome import _cause

from .support.cli import FIXTURES
from .support.faults import rank_processes, wait_for_rank

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
    time.sleep(1.0)  # let it print, so its log has a tail
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


SUMMARY = """Failures:
[1]:
  time      : 2026-11-25_13:01:02
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 12)
  traceback : Signal 9 (SIGKILL) received by PID 12
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-25_13:01:01
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 11)
"""


def test_a_rank_killed_by_a_signal_is_the_cause_even_when_torchrun_names_its_peer_first() -> None:
    """torchrun's root cause is the earliest timestamp: the peer that died of the kill mid-collective can be it."""
    rank, code = _cause(SUMMARY)
    assert rank is not None and (rank.group(1), code) == ("1", -9)
    rank, code = _cause(SUMMARY.replace("-9 (pid: 12)", "1 (pid: 12)"))  # no signal: torchrun's root cause
    assert rank is not None and (rank.group(1), code) == ("0", 1)


STOPPED_BY_TORCHRUN = """[rank0]:[rank0]: RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:36274: \
Connection reset by peer. This is typically caused by a remote worker hanging or bugs in the application. GLHF!
[rank1]:boom: this rank fails on purpose
W1126 21:10:56.832000 4680 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 4685 closing \
signal SIGTERM
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-26_21:10:56
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 4685)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 4685
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-26_21:10:56
  rank      : 1 (local_rank: 1)
  exitcode  : 3 (pid: 4686)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def test_a_rank_that_torchrun_itself_stopped_is_never_the_cause() -> None:
    """The survivor torchrun sends SIGTERM to is listed under Failures with a signal: the shape a CI run failed on."""
    rank, code = _cause(STOPPED_BY_TORCHRUN)
    assert rank is not None and (rank.group(1), code) == ("1", 3)


PEER_TIMESTAMPED_FIRST = """[rank0]:[rank0]: RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error \
[127.0.0.1]:36274: Connection reset by peer. GLHF!
[rank1]:boom: this rank fails on purpose
============================================================
Failures:
[1]:
  time      : 2026-11-25_13:01:02
  rank      : 1 (local_rank: 1)
  exitcode  : 3 (pid: 12)
  error_file: <N/A>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-25_13:01:01
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 11)
  error_file: /tmp/torchelastic/error.json
============================================================
"""


def test_a_rank_that_died_of_its_lost_peer_is_not_the_cause_even_as_torchrun_root_cause() -> None:
    """Rank 0 died of the closed connection and was timestamped first; rank 1, which left with 3, is the cause."""
    rank, code = _cause(PEER_TIMESTAMPED_FIRST)
    assert rank is not None and (rank.group(1), code) == ("1", 3)
    # Without the peer's last words, torchrun's root cause stands.
    rank, code = _cause(PEER_TIMESTAMPED_FIRST.replace("Connection reset by peer", "out of memory"))
    assert rank is not None and (rank.group(1), code) == ("0", 1)
