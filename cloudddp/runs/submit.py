"""Submitting a job, the one way the command line and the Python API both do it: on the backend named, or with
``-b auto`` on the first of the ranking that takes it (:mod:`~cloudddp.runs.placement`); then its recovery chain
(:mod:`~cloudddp.runs.recovery`) with the sizes and backends it may move to. A first size the platform refuses at
submission for quota, under ``limits.recover_to: next_size``, is followed at once by the next size of the ranking
(:mod:`~cloudddp.runs.queued`).

Before anything is sent, the caller may be asked: ``confirm`` gets each plan about to launch (under ``-b auto``,
each backend tried in turn) and a no stops the submit with :class:`~cloudddp.errors.Declined`, nothing sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cloudddp.backends.base import Backend, Progress
from cloudddp.backends.checks import RefusedForCapacity
from cloudddp.plan import Plan
from cloudddp.runs import recovery
from cloudddp.runs.fallback import plan_fallback
from cloudddp.runs.placement import AUTO, Placement, launch_first, survey
from cloudddp.runs.queued import launch_next_size
from cloudddp.runs.runner import Checkpoints, Confirm, Runner, Submission
from cloudddp.spec.model import JobSpec


@dataclass(frozen=True)
class Submitted:
    """A job just launched: its run, the backend it runs on and the plan that was sent."""

    run_id: str
    backend: Backend[Any]
    plan: Plan


def submit(
    spec: JobSpec,
    backend: str,
    *,
    checks: bool = True,
    provision: bool = True,
    recover: int | None = None,
    progress: Progress | None = None,
    resume_from: Checkpoints | None = None,
    ranking: list[Placement] | None = None,
    confirm: Confirm | None = None,
    **options: Any,
) -> Submitted:
    """Render, check and launch ``spec`` on ``backend`` (``"auto"``: the best of ``ranking``, asked now when not
    given, that takes it), ``resume_from``'s latest checkpoint carried in first; then start its recovery: up to
    ``recover`` resubmissions (None: ``limits.max_recoveries``) by a detached watcher. ``options`` construct a named
    backend (e.g. a credential)."""
    if backend == AUTO:
        return _placed(spec, ranking or survey(spec, checks=checks), provision, recover, progress, resume_from, confirm)
    others = []
    if spec.limits.recover_to == "any_backend":  # the job's other backends, checked when moved to
        others = [p.to_state() for p in survey(spec, checks=False) if p.usable and p.backend != backend]
    runner = Runner.open(backend, **options)
    fallback, note = None, ""
    try:
        submission = runner.submit(
            spec, checks=checks, provision=provision, progress=progress, resume_from=resume_from, confirm=confirm
        )
    except RefusedForCapacity as refused:  # with next sizes to go to (recover_to: next_size), the next at once
        fallback = plan_fallback(runner.backend, spec)
        if not fallback.plans or (spec.limits.max_recoveries if recover is None else recover) <= 0:
            raise
        literals = runner.backend.render(spec).literal_secrets()
        submission, note = launch_next_size(
            runner, fallback, refused, literals=literals, checks=checks, provision=provision, confirm=confirm,
            resume_from=resume_from,
        )  # fmt: skip
        if progress is not None:
            progress.step(f"submitted {submission.run_id} {note}")
    recovery.start_for(runner, spec, submission, recover, placements=others, note=note, fallback=fallback)
    return Submitted(submission.run_id, runner.backend, submission.plan)


def _placed(
    spec: JobSpec,
    ranking: list[Placement],
    provision: bool,
    recover: int | None,
    progress: Progress | None,
    resume_from: Checkpoints | None,
    confirm: Confirm | None,
) -> Submitted:
    placed = launch_first(ranking, provision=provision, progress=progress, resume_from=resume_from, confirm=confirm)
    plan = placed.placement.plan
    assert plan is not None
    runner = Runner.open(placed.placement.backend)
    rest = [p.to_state() for p in placed.rest]
    note = placed.note(ranking)
    recovery.start_for(runner, spec, Submission(plan, placed.run_id), recover, placements=rest, note=note)
    return Submitted(placed.run_id, runner.backend, plan)
