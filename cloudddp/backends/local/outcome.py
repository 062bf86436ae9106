"""How a local run ended, from its nodes' exit codes and what they printed: the same decision whether the
supervisor that started the nodes saw them end, or one that adopted them did, or nobody did (``status`` of a run
whose supervisor and nodes are all gone)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from cloudddp.backends.base import Cause, RunState
from cloudddp.backends.local.rundir import RunDir

_FAILED_RANK = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank\s*:\s*(\d+)\)")
_EXITCODE = re.compile(r"exitcode\s*:\s*(-?\d+)")
_PID = re.compile(r"\(pid:\s*(\d+)\)")
_TORCHRUN_STOPPED = re.compile(r"Sending process (\d+) closing signal")
_PEER_LOST = re.compile(
    r"Connection (?:reset|closed) by peer|Broken pipe|remote process exited or there was a network error"
    r"|DistNetworkError|NCCL communicator was aborted",
    re.IGNORECASE,
)
"""What a rank says when it died because a peer went away mid-collective (gloo, NCCL, the c10d store)."""


def failure(run: RunDir, codes: list[int], first_failed: int | None = None) -> dict[str, Any]:
    """Which rank failed and why, from torchrun's error summary, with the tail of its log; or which node was lost,
    when its agent itself was killed (a machine gone, out of memory). ``first_failed``: the node seen failing first."""
    info: dict[str, Any] = {"exit_codes": codes}
    first = first_failed
    if first is None:  # every node had ended by the time they were polled: an agent killed by a signal first
        first = next((node for node, code in enumerate(codes) if code < 0), None)
    order = [first] if first is not None else []
    for node in [*order, *range(len(codes))]:
        code = codes[node]
        if code == 0:
            continue
        text = run.node_log(node).read_text(errors="replace") if run.node_log(node).exists() else ""
        if code < 0 and node == first:  # the agent died, not a rank under it
            info.update(node=node, exitcode=code, lost=True, log_tail=text.splitlines()[-20:])
            break
        rank, exitcode = _cause(text)
        info.update(node=node, exitcode=exitcode if exitcode is not None else code)
        if rank:
            info.update(rank=int(rank.group(1)), local_rank=int(rank.group(2)))
            prefix = f"[rank{rank.group(1)}]:"
            lines = [ln[len(prefix) :] for ln in text.splitlines() if ln.startswith(prefix)]
        else:
            lines = []
        lines = lines or text[: text.find("Traceback")].splitlines()  # else what torchrun said
        info["log_tail"] = lines[-20:]
        break
    return info


def _cause(text: str) -> tuple[re.Match[str] | None, int | None]:
    """The failed rank (its ``rank : R (local_rank: L)`` match) and exit code, from torchrun's error summary.

    torchrun's "Root Cause" is merely the earliest timestamp, and its "Failures:" list holds consequences too, so
    each entry is weighed by what the log says of it, in this order:

    1. a rank that torchrun itself stopped (its log says "Sending process <pid> closing signal") is never the cause;
    2. a rank killed by a signal from outside (a person, the OOM killer) is;
    3. else a rank that did not die of a lost peer (gloo's "Connection reset by peer", NCCL's "remote process
       exited") is: its peer died mid-collective because of it, and may have been timestamped first;
    4. else torchrun's root cause.

    Fresh-clone runs named the survivor once by each of the shortcuts: the root cause (3) and a signalled rank (1).
    """
    entries = _summary_entries(text)
    if not entries:
        return None, None
    stopped_by_torchrun = set(_TORCHRUN_STOPPED.findall(text))
    candidates = [entry for entry in entries if entry.pid not in stopped_by_torchrun] or entries
    killed = [entry for entry in candidates if entry.exitcode < 0]
    if killed:
        return killed[0].rank, killed[0].exitcode
    own = [entry for entry in candidates if not _died_of_a_peer(text, entry)]
    chosen = next((entry for entry in own if entry.root), own[0]) if own else entries[-1]
    return chosen.rank, chosen.exitcode


@dataclass(frozen=True)
class _Entry:
    """One rank in torchrun's error summary."""

    rank: re.Match[str]
    exitcode: int
    pid: str
    block: str
    root: bool


def _summary_entries(text: str) -> list[_Entry]:
    """The ranks listed under "Failures:" and then "Root Cause" (last), from the last summary in ``text``."""
    start = text.rfind("Failures:") if "Failures:" in text else text.rfind("Root Cause")
    if start < 0:
        return []
    summary = text[start:]
    root_at = summary.find("Root Cause")
    entries = []
    block_start = 0
    for block in re.split(r"(\n\[\d+\]:)", summary):
        rank, code, pid = _FAILED_RANK.search(block), _EXITCODE.search(block), _PID.search(block)
        if rank and code:
            root = 0 <= root_at < block_start
            entries.append(_Entry(rank, int(code.group(1)), pid.group(1) if pid else "", block, root))
        block_start += len(block)
    return sorted(entries, key=lambda entry: entry.root)  # the root cause last, each part in torchrun's order


def _died_of_a_peer(text: str, entry: _Entry) -> bool:
    """Whether this rank's last words (in the summary, or its own prefixed lines) say a peer went away."""
    prefix = f"[rank{entry.rank.group(1)}]:"
    last_words = [line for line in text.splitlines() if line.startswith(prefix)][-30:]
    return bool(_PEER_LOST.search(entry.block) or any(_PEER_LOST.search(line) for line in last_words))


def describe_failure(info: dict[str, Any]) -> str:
    if info.get("lost"):
        return f"node {info['node']} was lost: its torchrun agent was killed by signal {-info['exitcode']}"
    if "rank" in info:
        code = info.get("exitcode")
        why = f"killed by signal {-code}" if isinstance(code, int) and code < 0 else f"exit code {code}"
        return f"rank {info['rank']} (node {info.get('node', 0)}) failed: {why}"
    return f"node {info.get('node', 0)} failed with exit code {info.get('exitcode')}"


def conclude(
    run: RunDir, codes: list[int], stop_reason: str | None, first_failed: int | None = None, *, max_runtime: Any = None
) -> tuple[RunState, str, dict[str, Any]]:
    """The end state, its message and what ``status.json`` records with it (exit codes, failure, cause)."""
    if stop_reason == "cancelled":
        return RunState.CANCELLED, "cancelled", {"exit_codes": codes, "cause": Cause.CANCELLED.value}
    if stop_reason == "max_runtime":
        message = f"stopped after limits.max_runtime ({max_runtime} s)"
        return RunState.FAILED, message, {"exit_codes": codes, "cause": Cause.LIMIT.value}
    if stop_reason is not None and stop_reason.startswith("stalled"):
        return RunState.FAILED, stop_reason, {"exit_codes": codes, "cause": Cause.STALLED.value}
    if codes and all(c == 0 for c in codes):
        return RunState.SUCCEEDED, "finished", {"exit_codes": codes}
    if not codes:
        return (
            RunState.FAILED,
            "the run's supervisor exited before it started the nodes",
            {
                "exit_codes": codes,
                "cause": Cause.INFRASTRUCTURE.value,
            },
        )
    info = failure(run, codes, first_failed)
    cause = Cause.INFRASTRUCTURE if info.get("lost") else Cause.USER_ERROR
    return RunState.FAILED, describe_failure(info), {"exit_codes": codes, "failure": info, "cause": cause.value}
