"""What local and Slurm share about the torchrun agents they run (cloudddp.backends.torchrun): a store of its own
for each restart, and which rank failed, read from the agent's log in the shapes of torchrun's error summary that
fresh-clone runs of this suite met, where torchrun's own "Root Cause" or a signalled entry named the wrong rank."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cloudddp.api import Job
from cloudddp.backends.slurm.agent import AGENT
from cloudddp.backends.torchrun import EACH_ROUND_ANEW, FailedRank, failed_rank
from tests.support.cli import FIXTURES

TINY = FIXTURES / "tinyjob" / "job.yaml"


@pytest.mark.parametrize("restarts", [0, 2])
def test_an_agent_that_restarts_its_workers_gives_each_attempt_a_store_of_its_own(restarts: int) -> None:
    """torch's shared store outlives restarts and hands a restarted rank its peer's old address, and its opt-out has a
    worker bind a released port on every interface: local nodes and Slurm's agents start with EACH_ROUND_ANEW."""
    job = Job.load(TINY, [f"limits.max_restarts={restarts}"])
    local = job.render("local")
    slurm = job.override("slurm.launch=torchrun").render("slurm")
    for node in local.request.nodes:
        assert node.argv[node.argv.index("-c") + 1].startswith(EACH_ROUND_ANEW), node.argv
        assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in node.env
    assert EACH_ROUND_ANEW in AGENT and "rdzv_wrapper=" in slurm.documents["job.sbatch"]
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=" not in slurm.documents["job.sbatch"]


def test_each_round_of_the_rendezvous_forgets_the_last_rounds_store_and_torchs_opt_out() -> None:
    """The patch itself, on torch's own handler (in a process of its own: it patches torch)."""
    probe = (
        "import os\n"
        "os.environ['TORCH_DISABLE_SHARE_RDZV_TCP_STORE'] = '1'\n"
        "from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler as H\n"
        "H.next_rendezvous = lambda self: (self._bootstrap_store_info, self._shared_tcp_store_server)\n"
        + EACH_ROUND_ANEW
        + "h = object.__new__(H)\n"
        "h._bootstrap_store_info, h._shared_tcp_store_server = 'last round', 'last store'\n"
        "print(h.next_rendezvous(), os.environ.get('TORCH_DISABLE_SHARE_RDZV_TCP_STORE'))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "(None, None) None"


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


KILLED_WHILE_ITS_PEER_CONNECTED = """[rank0]:RuntimeError: Gloo connectFullMesh failed with \
[gloo/transport/tcp/pair.cc:152] timed out connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:11694
W1126 21:23:47.993000 14138 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 14171 closing \
signal SIGTERM
E1126 21:23:48.193000 14138 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) \
local_rank: 0 (pid: 14170) of binary: python
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-26_21:23:48
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 14171)  (SIGKILL)
  traceback : Signal 9 (SIGKILL) received by PID 14171
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-26_21:23:47
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 14170)
============================================================
"""


def test_a_rank_killed_from_outside_is_the_cause_though_torchrun_also_sent_it_sigterm() -> None:
    """Rank 1 was SIGKILLed while rank 0 still connected; rank 0 failed first, and torchrun then sent SIGTERM to
    the dying rank 1: the SIGKILL it died of was not torchrun's (a fresh-clone run named rank 0 so)."""
    assert failed_rank(KILLED_WHILE_ITS_PEER_CONNECTED) == FailedRank(rank=1, local_rank=1, exitcode=-9)
    # Had it died of torchrun's own SIGTERM, it would be a consequence, and rank 0 the cause.
    stopped = KILLED_WHILE_ITS_PEER_CONNECTED.replace("-9 (pid: 14171)  (SIGKILL)", "-15 (pid: 14171)  (SIGTERM)")
    stopped = stopped.replace("Connection refused", "bad config")
    assert failed_rank(stopped) == FailedRank(rank=0, local_rank=0, exitcode=1)


FORCED_AFTER_ITS_TIMEOUT = """[rank1]:RuntimeError: Gloo connectFullMesh failed with timed out connecting
W1126 21:46:09.258000 8068 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 8086 closing \
signal SIGTERM
W1126 21:46:39.259000 8068 torch/distributed/elastic/multiprocessing/api.py:1047] Unable to shutdown process 8086 \
via 15, forcefully exiting via 9
============================================================
Failures:
[1]:
  time      : 2026-11-26_21:46:39
  rank      : 0 (local_rank: 0)
  exitcode  : -9 (pid: 8086)  (SIGKILL)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-26_21:46:09
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 8087)  (SIGKILL)
============================================================
"""


def test_a_rank_torchrun_killed_after_sigterm_went_unheeded_is_not_the_cause() -> None:
    """Rank 0 caught SIGTERM and stayed; torchrun's SIGKILL 30 s later (logged with signal numbers) is its own."""
    assert failed_rank(FORCED_AFTER_ITS_TIMEOUT) == FailedRank(rank=1, local_rank=1, exitcode=-9)
