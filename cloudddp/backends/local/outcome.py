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
from cloudddp.backends.verdicts import cause_of, concluded
from cloudddp.injob import culprit


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


def stall_failure(run: RunDir, reason: str) -> dict[str, Any]:
    """The culprit of a stalled run, judged (:func:`cloudddp.injob.culprit.decide`) from the stacks each quiet rank
    wrote after the notice (faulthandler's, or py-spy's): the ranks that wait in no collective first, with the line
    each is on, then those waiting for them."""
    quiet = [int(r) for r in re.findall(r"rank (\d+) quiet for", reason)]
    dumped: dict[int, list[str]] = {rank: [] for rank in quiet}
    for path in run.node_logs():
        text = path.read_text(errors="replace") if path.exists() else ""
        after = text[text.rfind(STACKS_FOLLOW) :] if STACKS_FOLLOW in text else ""
        for rank in quiet:
            dumped[rank] += rank_lines(after, rank)
    stacks = [_stacks_of(rank, lines) for rank, lines in dumped.items() if lines]
    verdict = culprit.decide(stacks, None)
    verdict.silent = sorted(set(quiet) - {s.rank for s in stacks})
    order = verdict.culprit_ranks() + sorted(r for ranks in verdict.waiting.values() for r in ranks)
    return {
        "stalled_ranks": order,
        **verdict.to_dict(),
        "hang": verdict.line().removeprefix(culprit.TAG).strip(),
        "log_tail": culprit.render(stacks),
    }


def _stacks_of(rank: int, lines: list[str]) -> culprit.RankStacks:
    text = "\n".join(lines)
    threads = culprit.parse_py_spy(text) if "(most recent call first)" not in text else []
    return culprit.RankStacks(rank, threads or culprit.parse_faulthandler(text))


def concluded_ending(run: RunDir, codes: list[int]) -> Ending | None:
    """A run the job itself concluded (:mod:`cloudddp.backends.verdicts`): a hang the hang doctor judged, or the
    interconnect pre-flight's refusal."""
    lines = (ln for path in run.node_logs() if path.exists() for ln in path.read_text(errors="replace").splitlines())
    found = concluded(lines)
    if found is None:
        return None
    cause, message = cause_of(found)
    return Ending(RunState.FAILED, message, codes, failure={"exit_codes": codes, **found}, cause=cause)


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
    if stop_reason == "cancelled":  # the nodes' exit codes are the stop's (torchrun exits 1 on SIGTERM), no failure
        stopped = [c for c in codes if c != 0]
        how = f" (exit code{'s' if len(stopped) > 1 else ''} {', '.join(map(str, stopped))} from the stop)"
        return Ending(RunState.CANCELLED, "cancelled on request" + (how if stopped else ""), [], cause=Cause.CANCELLED)
    if stop_reason == "max_runtime":
        return Ending(RunState.FAILED, f"stopped after limits.max_runtime ({max_runtime} s)", codes, cause=Cause.LIMIT)
    if stop_reason is not None and stop_reason.startswith("stalled"):
        stalled = stall_failure(run, stop_reason)
        message = f"{stop_reason.split(': rank ')[0]}; hang: {stalled['hang']}"
        return Ending(RunState.FAILED, message, codes, failure=stalled, cause=Cause.HANG)
    if codes and all(c == 0 for c in codes):
        return Ending(RunState.SUCCEEDED, "finished", codes)
    if not codes:
        message = "the run's supervisor exited before it started the nodes"
        return Ending(RunState.FAILED, message, codes, cause=Cause.INFRASTRUCTURE)
    ending = concluded_ending(run, codes)
    if ending is not None:
        return ending
    info = failure(run, codes, first_failed)
    cause = Cause.INFRASTRUCTURE if info.get("lost") else Cause.USER_ERROR
    return Ending(RunState.FAILED, describe_failure(info), codes, failure=info, cause=cause)
