"""What the backends that run torchrun agents themselves (local, Slurm) share: the agent's patch that gives each
attempt of the workers a store of its own (:data:`EACH_ROUND_ANEW`), and which rank failed it, read from what it
printed (:func:`failed_rank`).

torchrun's error summary is not enough on its own. Its "Root Cause" is merely the earliest timestamp, and its
"Failures:" list holds consequences too: the peers that died of the failure mid-collective (possibly stamped
first), and the survivors torchrun itself stopped with SIGTERM. So each entry is weighed by what the log says of
it, in this order:

1. a rank that died of the signal torchrun itself sent it (its log says "Sending process <pid> closing signal
   SIGTERM", or that it then forced SIGKILL) is never the cause;
2. a rank killed by a signal from outside (a person, the OOM killer) is, even when torchrun also sent it one
   after it was already dying;
3. else a rank that did not die of a lost peer (gloo's "Connection reset by peer", NCCL's "remote process
   exited") is;
4. else torchrun's root cause.

Fresh-clone runs of the test suite named the survivor by each shortcut once: the bare root cause (3), "any
signalled rank" (1) and "any rank torchrun signalled" (2).
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

_RANK = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank\s*:\s*(\d+)\)")
_EXITCODE = re.compile(r"exitcode\s*:\s*(-?\d+)")
_PID = re.compile(r"\(pid:\s*(\d+)\)")
_ENTRY_START = re.compile(r"(\n\[\d+\]:)")
_SENT_BY_TORCHRUN = re.compile(
    r"Sending process (\d+) closing signal (SIG[A-Z]+|\d+)"
    r"|Unable to shutdown process (\d+) via \S+, forcefully exiting via (SIG[A-Z]+|\d+)"
)
"""torchrun's agent stopping its workers: SIGTERM first, then SIGKILL to those still there after its timeout."""
_PEER_LOST = re.compile(
    r"Connection (?:reset|closed) by peer|Broken pipe|remote process exited or there was a network error"
    r"|DistNetworkError|NCCL communicator was aborted|Connection refused|timed out connecting",
    re.IGNORECASE,
)
"""What a rank says when it died because a peer went away mid-collective (gloo, NCCL, the c10d store)."""


EACH_ROUND_ANEW = """import os
os.environ.pop("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", None)
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler as _Handler
_next_round = _Handler.next_rendezvous
def _anew(self):
    self._bootstrap_store_info = None
    self._shared_tcp_store_server = None
    return _next_round(self)
_Handler.next_rendezvous = _anew
"""
"""The start of every torchrun agent's ``python -c`` wrapper: a workers' store made anew for each round of the
rendezvous (each attempt of the workers), hosted by the rank-0 agent on a socket it binds before anyone learns the
port, and never released.

Since torch 2.5 the c10d rendezvous hands its workers one TCPStore that outlives restarts, so a restarted rank can
read the previous attempt's address of a peer and fail to connect to it ("Connection refused" in gloo's
connectFullMesh; pytorch/pytorch#135712). torch's own way out, ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``, has rank 0's
worker host the store on a port ``get_free_port()`` bound and released, on every interface: another user takes it
first or reads and writes the store (so the variable is removed here, whoever set it). Forgetting the last round's
store instead keeps the agent-hosted store (the workers are its clients, ``TORCHELASTIC_USE_AGENT_STORE=True``) and
gives every attempt an empty one; the backend's wrapper decides where the agent binds it (local: 127.0.0.1)."""


@dataclass(frozen=True)
class FailedRank:
    """One rank in torchrun's error summary: its global and local rank, its exit code (negative: a signal)."""

    rank: int
    local_rank: int
    exitcode: int


@dataclass(frozen=True)
class _Entry:
    failed: FailedRank
    pid: str
    block: str
    root: bool


def failed_rank(log: str) -> FailedRank | None:
    """The rank that failed the agent whose output ``log`` is (see the module's docstring); None without a
    summary."""
    entries = _summary_entries(log)
    if not entries:
        return None
    sent = _signals_sent_by_torchrun(log)
    candidates = [entry for entry in entries if -entry.failed.exitcode not in sent.get(entry.pid, set())] or entries
    killed = [entry for entry in candidates if entry.failed.exitcode < 0]
    if killed:
        return killed[0].failed
    own = [entry for entry in candidates if not _died_of_a_peer(log, entry)]
    chosen = next((entry for entry in own if entry.root), own[0]) if own else entries[-1]
    return chosen.failed


def _signals_sent_by_torchrun(log: str) -> dict[str, set[int]]:
    """``{pid: {signal number, ...}}`` of the signals torchrun's agent says it sent its workers while stopping."""
    sent: dict[str, set[int]] = {}
    for match in _SENT_BY_TORCHRUN.finditer(log):
        pid, name = match.group(1) or match.group(3), match.group(2) or match.group(4)
        number = int(name) if name.isdigit() else getattr(signal, name, None)
        if isinstance(number, int):
            sent.setdefault(pid, set()).add(int(number))
    return sent


def _summary_entries(log: str) -> list[_Entry]:
    """The ranks listed under "Failures:" and then "Root Cause" (last), from the last summary in ``log``."""
    start = log.rfind("Failures:") if "Failures:" in log else log.rfind("Root Cause")
    if start < 0:
        return []
    summary = log[start:]
    root_at = summary.find("Root Cause")
    entries = []
    block_start = 0
    for block in _ENTRY_START.split(summary):
        rank, code, pid = _RANK.search(block), _EXITCODE.search(block), _PID.search(block)
        if rank and code:
            failed = FailedRank(int(rank.group(1)), int(rank.group(2)), int(code.group(1)))
            entries.append(_Entry(failed, pid.group(1) if pid else "", block, 0 <= root_at < block_start))
        block_start += len(block)
    return sorted(entries, key=lambda entry: entry.root)  # the root cause last, each part in torchrun's order


def _died_of_a_peer(log: str, entry: _Entry) -> bool:
    """Whether this rank's last words (in the summary, or its own ``[rankN]:`` lines) say a peer went away."""
    last_words = rank_lines(log, entry.failed.rank)[-30:]
    return bool(_PEER_LOST.search(entry.block) or any(_PEER_LOST.search(line) for line in last_words))


def rank_lines(log: str, rank: int) -> list[str]:
    """What one rank printed, without the ``[rankN]:`` tag the agent puts before each of its lines."""
    prefix = f"[rank{rank}]:"
    return [line[len(prefix) :] for line in log.splitlines() if line.startswith(prefix)]
