"""A run left waiting in its platform's queue, and a first size refused at submission, under a recovery that can move
(``limits.recover_to: next_size``, ``-b auto``, ``recover_to: any_backend``).

Azure ML fails neither a job whose cluster cannot scale nor a serverless job whose quota other jobs use: it keeps it
``Queued`` (https://learn.microsoft.com/azure/machine-learning/how-to-use-serverless-compute, "Quota", read
2026-12-06), and its backend says so in the status (:data:`~cloudddp.backends.status.QUEUED`). A run still queued
``limits.queue_timeout`` after its launch is cancelled; once it has ended (so nothing runs twice) the chain reads it
as a capacity failure and moves on at once, since waiting again on the same size is what was just tried. A serverless
job without quota for its size is refused at submission
(:class:`~cloudddp.backends.checks.RefusedForCapacity`): a move already skips such a size, and a first size refused
so is followed at once by the next of the ranking (:func:`launch_next_size`).
"""

from __future__ import annotations

import dataclasses
import time

from cloudddp.backends.checks import PreflightFailed, RefusedForCapacity
from cloudddp.backends.status import QUEUED, Cause, RunState, RunStatus
from cloudddp.errors import CloudDDPError
from cloudddp.runs.fallback import Fallback
from cloudddp.runs.runner import Checkpoints, Confirm, Runner, Submission, declined_unless
from cloudddp.spec.values import written


def overdue(status: RunStatus, started: float, queue_timeout: float) -> bool:
    """Whether ``status`` is a run its backend says waits in the queue, launched at ``started``, for longer than
    ``queue_timeout`` seconds (0: never)."""
    waiting = status.state is RunState.PENDING and bool(status.details.get(QUEUED))
    return bool(queue_timeout) and waiting and time.time() - started >= queue_timeout


def as_capacity(status: RunStatus, started: float, queue_timeout: float) -> RunStatus:
    """The ending of a run cancelled for waiting too long, as the chain decides on it: a capacity failure saying how
    long it waited."""
    waited = written(max(queue_timeout, (status.ended_at or time.time()) - started))
    message = f"Queued for {waited}, longer than limits.queue_timeout ({written(queue_timeout)}): cancelled"
    return dataclasses.replace(status, state=RunState.FAILED, cause=Cause.CAPACITY, message=message)


def launch_next_size(
    runner: Runner,
    fallback: Fallback,
    refused: RefusedForCapacity,
    *,
    literals: dict[str, str],
    checks: bool,
    provision: bool,
    confirm: Confirm | None = None,
    resume_from: Checkpoints | None = None,
) -> tuple[Submission, str]:
    """The first size was refused at submission: launch the next sizes of ``fallback`` in turn (each asked of
    ``confirm``, after its checks unless ``checks`` is False) until one is taken; ``fallback`` is left holding the
    sizes after it. The submission and the note saying what was refused. ``refused``, naming every size's reason,
    when none is taken."""
    skipped = [f"{fallback.size} ({refused_why(refused)})"]
    while fallback.plans:
        nxt = fallback.plans.pop(0)
        plan = runner.backend.restore(nxt["plan"], literals)
        declined_unless(confirm, plan)
        try:
            if resume_from is not None:
                runner.carry_in(plan, resume_from)
            run_id = runner.launch(plan, checks=checks, provision=provision)
        except CloudDDPError as e:  # a failed check, or the service refused that size too: the next may launch
            skipped.append(f"{nxt['size']} ({refused_why(e)})")
            continue
        fallback.size = nxt["size"]
        return Submission(plan, run_id), f"on {nxt['size']}: refused at submission: {', '.join(skipped)}"
    raise RefusedForCapacity(
        f"no size of the ranking was taken: {', '.join(skipped)}", hint=refused.hint or "request more quota"
    )


def refused_why(error: Exception) -> str:
    """Why a launch was refused, on one line: each failed preflight check, else the error's first line."""
    if isinstance(error, PreflightFailed):
        return "; ".join(f"{c.name}: {c.detail}" for c in error.checks if c.ok is not True)
    return (str(error).splitlines() or [type(error).__name__])[0]
