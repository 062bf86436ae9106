"""Which rank failed a torchrun agent, read from its log (cloudddp.backends.torchrun_failures): the shapes of
torchrun's error summary that fresh-clone runs of this suite met, where torchrun's own "Root Cause" or a signalled
entry named the wrong rank."""

from __future__ import annotations

from cloudddp.backends.torchrun_failures import FailedRank, failed_rank

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
    assert failed_rank(SUMMARY) == FailedRank(rank=1, local_rank=1, exitcode=-9)
    no_signal = SUMMARY.replace("-9 (pid: 12)", "1 (pid: 12)")
    assert failed_rank(no_signal) == FailedRank(rank=0, local_rank=0, exitcode=1)  # torchrun's root cause


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


def test_a_rank_that_torchrun_itself_stopped_is_never_thefailed_rank() -> None:
    """The survivor torchrun sends SIGTERM to is listed under Failures with a signal: the shape a CI run failed on."""
    assert failed_rank(STOPPED_BY_TORCHRUN) == FailedRank(rank=1, local_rank=1, exitcode=3)


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


def test_a_rank_that_died_of_its_lost_peer_is_not_the_cause_even_as_torchrun_rootfailed_rank() -> None:
    """Rank 0 died of the closed connection and was timestamped first; rank 1, which left with 3, is the cause."""
    assert failed_rank(PEER_TIMESTAMPED_FIRST) == FailedRank(rank=1, local_rank=1, exitcode=3)
    # Without the peer's last words, torchrun's root cause stands.
    other_words = PEER_TIMESTAMPED_FIRST.replace("Connection reset by peer", "out of memory")
    assert failed_rank(other_words) == FailedRank(rank=0, local_rank=0, exitcode=1)


def test_a_log_without_torchrun_summary_names_no_rank() -> None:
    assert failed_rank("Traceback (most recent call last):\nRuntimeError: boom\n") is None
    assert failed_rank("") is None
