"""How a local run ended, from its nodes' exit codes and what they printed: the same decision whether the
supervisor that started the nodes saw them end, or one that adopted them did, or nobody did (``status`` of a run
whose supervisor and nodes are all gone)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from cloudddp.backends.local.rundir import RunDir
from cloudddp.backends.status import Cause, RunState
from cloudddp.backends.torchrun import failed_rank, rank_lines


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
        failed = failed_rank(text)
        info.update(node=node, exitcode=failed.exitcode if failed else code)
        if failed:
            info.update(rank=failed.rank, local_rank=failed.local_rank)
        lines = (rank_lines(text, failed.rank) if failed else []) or text[: text.find("Traceback")].splitlines()
        info["log_tail"] = lines[-20:]
        break
    return info


STACKS_FOLLOW = "their Python stacks follow"
"""The end of the supervisor's notice before the stacks of a stalled run's ranks (supervisor.py)."""
STACK_LINES = 24
WAITING = re.compile(
    r" in (all_reduce|all_gather\w*|broadcast\w*|reduce_scatter\w*|barrier|monitored_barrier|backward|"
    r"_engine_run_backward|wait|recv|send|all_to_all\w*)$"
)
"""A frame of a rank waiting for the others in a collective (torch.distributed's Python functions, autograd's
backward, where DDP's all-reduce waits): such a rank waits for the one that stopped."""


def stall_failure(run: RunDir, reason: str) -> dict[str, Any]:
    """The Python stacks of a stalled run's quiet ranks from what each node logged after the notice, the ranks
    that stopped first (no frame waiting in a collective), then those waiting for them, each group the longest
    quiet first: what ``status`` and the attached view show, since the attached view follows rank 0's lines."""
    quiet = [int(r) for r in re.findall(r"rank (\d+) quiet for", reason)]
    dumped: dict[int, list[str]] = {rank: [] for rank in quiet}
    for path in run.node_logs():
        text = path.read_text(errors="replace") if path.exists() else ""
        after = text[text.rfind(STACKS_FOLLOW) :] if STACKS_FOLLOW in text else ""
        for rank in quiet:
            # the stack, without the rank launcher's own notices of the stop that follows it
            dumped[rank] += [ln for ln in rank_lines(after, rank) if ln.strip() and not ln.startswith("_cloudddp_")]
    order = sorted(quiet, key=lambda r: any(WAITING.search(line.rstrip()) for line in dumped[r]))
    tail: list[str] = []
    for rank in order:
        if dumped[rank] and len(tail) < STACK_LINES - 1:
            waits = any(WAITING.search(line.rstrip()) for line in dumped[rank])
            tail.append(f"rank {rank}{' (waiting in a collective)' if waits else ''}, most recent call first:")
            tail += dumped[rank][: STACK_LINES - len(tail)]
    return {"stalled_ranks": order, "log_tail": tail}


def describe_failure(info: dict[str, Any]) -> str:
    if info.get("lost"):
        return f"node {info['node']} was lost: its torchrun agent was killed by signal {-info['exitcode']}"
    if "rank" in info:
        code = info.get("exitcode")
        why = f"killed by signal {-code}" if isinstance(code, int) and code < 0 else f"exit code {code}"
        return f"rank {info['rank']} (node {info.get('node', 0)}) failed: {why}"
    return f"node {info.get('node', 0)} failed with exit code {info.get('exitcode')}"


@dataclass(frozen=True)
class Ending:
    """How a run ended: its state, its message and what ``status.json`` records with them."""

    state: RunState
    message: str
    exit_codes: list[int]
    failure: dict[str, Any] | None = None
    cause: Cause | None = None

    def changes(self) -> dict[str, Any]:
        """The keys of ``status.json`` it sets besides the state and the message (a failure and a cause only where
        it has them)."""
        changes: dict[str, Any] = {"exit_codes": self.exit_codes}
        if self.failure is not None:
            changes["failure"] = self.failure
        if self.cause is not None:
            changes["cause"] = self.cause.value
        return changes


def conclude(
    run: RunDir, codes: list[int], stop_reason: str | None, first_failed: int | None = None, *, max_runtime: Any = None
) -> Ending:
    """The end state, its message and what ``status.json`` records with it (exit codes, failure, cause)."""
    if stop_reason == "cancelled":
        return Ending(RunState.CANCELLED, "cancelled", codes, cause=Cause.CANCELLED)
    if stop_reason == "max_runtime":
        return Ending(RunState.FAILED, f"stopped after limits.max_runtime ({max_runtime} s)", codes, cause=Cause.LIMIT)
    if stop_reason is not None and stop_reason.startswith("stalled"):
        return Ending(RunState.FAILED, stop_reason, codes, failure=stall_failure(run, stop_reason), cause=Cause.STALLED)
    if codes and all(c == 0 for c in codes):
        return Ending(RunState.SUCCEEDED, "finished", codes)
    if not codes:
        message = "the run's supervisor exited before it started the nodes"
        return Ending(RunState.FAILED, message, codes, cause=Cause.INFRASTRUCTURE)
    info = failure(run, codes, first_failed)
    cause = Cause.INFRASTRUCTURE if info.get("lost") else Cause.USER_ERROR
    return Ending(RunState.FAILED, describe_failure(info), codes, failure=info, cause=cause)
