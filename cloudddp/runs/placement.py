"""``-b auto``: which backend a job goes to, and in what order the others follow when one cannot take it.

The backends considered are the job's ``backends:`` (most preferred first) or, without it, those the user
configuration sets up (:func:`cloudddp.spec.userconfig.configured_backends`). Each is asked what it would send
(``render``, offline) and, unless checks are skipped, its preflight checks (credentials, quota, the size offered
in the region); a backend that cannot render the job or fails a check is set aside with the reason. The others
are ranked:

1. a backend whose own estimate says the job would wait more than :data:`START_SOON_SECONDS` to start (Slurm's
   ``sbatch --test-only``) comes after those that start now or do not say;
2. then by price, cheapest first: by the job's estimated whole cost when every backend has one; otherwise (a script
   without a step time) by the price per hour of the whole allocation (nodes × the size's price), each line showing
   the most ``limits.max_runtime`` lets it cost. A backend without a price (a CPU size the catalog does not price,
   Slurm) comes after those with one. Each figure keeps its kind: ``*`` marks an EC2 price standing in for
   SageMaker's (a lower bound);
3. then in the order of preference, which only breaks ties.

The job is launched on the first; a launch the backend refuses (a quota, a capacity error, a name taken) moves to
the next, and the recovery watcher moves on after a capacity failure once the run has started
(:mod:`cloudddp.runs.recovery`), and after ``limits.queue_timeout`` when the platform keeps it queued (Azure ML).
Every step is said in the plan's lines and the run's history.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from cloudddp.backends.base import Backend, Progress
from cloudddp.backends.plugins import configured_backends
from cloudddp.errors import CloudDDPError, UserError
from cloudddp.plan import Plan
from cloudddp.runs.runner import Checkpoints, Confirm, Runner, declined_unless, get_backend
from cloudddp.spec.model import JobSpec
from cloudddp.spec.values import written

AUTO = "auto"
START_SOON_SECONDS = 3600.0
"""A start further away than this ranks the backend after those that start sooner."""


@dataclass
class Placement:
    """One backend's answer for the job: its plan, estimated cost and start, or why it cannot take the job."""

    backend: str
    preference: int
    plan: Plan | None = None
    cost: float | None = None
    """The estimated whole cost in USD (None: no estimate)."""
    starts_in: float | None = None
    """Seconds until it would start, where the backend can say (None: now, or unknown)."""
    refused: str = ""
    """Why it cannot take the job now (empty: it can)."""
    max_runtime_s: float = 0.0
    """The job's ``limits.max_runtime``: with the price per hour, the most a run without an estimate may cost."""

    @property
    def usable(self) -> bool:
        return self.plan is not None and not self.refused

    @property
    def hourly(self) -> float | None:
        """The price per hour of the whole allocation (all nodes); None: no dated price."""
        estimate = self.plan.estimate if self.plan else None
        return estimate.price_per_hour if estimate else None

    @property
    def mark(self) -> str:
        """``*`` for an EC2 price standing in for SageMaker's (a lower bound), else nothing."""
        estimate = self.plan.estimate if self.plan else None
        return "*" if estimate is not None and estimate.price_kind == "ec2-proxy" else ""

    def rank_key(self, by_estimate: bool = True) -> tuple[bool, bool, float, int]:
        """Start soon first, then cheapest (the whole job's estimate, or with ``by_estimate`` False the price per
        hour), a backend without the figure after those with it; the order of preference breaks ties."""
        late = self.starts_in is not None and self.starts_in > START_SOON_SECONDS
        figure = self.cost if by_estimate else self.hourly
        return (late, figure is None, figure or 0.0, self.preference)

    @property
    def region_mark(self) -> str:
        """`` ~REGION`` for a price from another region than the job's (the nearest the catalog lists), else nothing."""
        estimate = self.plan.estimate if self.plan else None
        return estimate.region_mark if estimate is not None else ""

    def line(self) -> str:
        """One line of the ranking, as the plan and ``submit -b auto`` show it: each figure with its marks."""
        if self.refused:
            return f"{self.backend}: not used: {self.refused}"
        hourly, mark, where = self.hourly, self.mark, self.region_mark
        if self.cost is not None:
            cost = f"${self.cost:,.2f}{mark}{where} for the whole job"
            cost += f" at ${hourly:,.2f}{mark}/h{where}" if hourly is not None else ""
        elif hourly is not None:
            cost = f"${hourly:,.2f}{mark}/h{where} for all nodes, no whole-job estimate"
            if self.max_runtime_s:
                ceiling = hourly * self.max_runtime_s / 3600
                cost += f" (at most ${ceiling:,.2f}{mark}{where} in limits.max_runtime {self.max_runtime_s / 3600:g} h)"
        else:
            cost = "no price"
        return f"{self.backend}: {cost}, {_start_words(self.starts_in)}"

    def to_state(self) -> dict[str, Any]:
        """What the recovery watcher keeps to launch this backend later (no secret values)."""
        assert self.plan is not None
        return {"backend": self.backend, "plan": self.plan.to_state()}


def _start_words(seconds: float | None) -> str:
    if seconds is None:
        return "starts when submitted (no queue estimate)"
    if seconds < 60:
        return "starts now"
    return f"starts in about {seconds / 3600:.1f} h" if seconds >= 3600 else f"starts in about {seconds / 60:.0f} min"


def backends_for(spec: JobSpec) -> list[str]:
    """The backends ``-b auto`` chooses from for ``spec``, most preferred first."""
    names = list(spec.backends) or configured_backends()
    if not names:
        raise UserError(
            "-b auto and limits.recover_to: any_backend need backends to choose from: the job names none "
            "(`backends:`) and the user configuration sets none up",
            hint="add `backends: [sagemaker, azureml, slurm]` to the job, or configure them (docs/configuration.md)",
        )
    return names


def survey(spec: JobSpec, *, checks: bool = True) -> list[Placement]:
    """Every candidate backend's answer for ``spec``, ranked (usable first, best first; then those set aside). The
    backends are asked at once: a cloud's checks may take seconds each."""
    names = backends_for(spec)
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        answers = list(pool.map(lambda n: _ask(n, names.index(n), spec, checks=checks), names))
    usable = [p for p in answers if p.usable]
    by_estimate = all(p.cost is not None for p in usable)
    usable.sort(key=lambda p: p.rank_key(by_estimate))
    ranking = usable + [p for p in answers if not p.usable]
    said = "placement (-b auto), best first: " + "; ".join(f"{n}. {p.line()}" for n, p in enumerate(ranking, 1))
    if any(p.mark for p in usable):
        said += " (* = EC2's on-demand price of the same instance, a lower bound for SageMaker's)"
    if any(p.region_mark for p in usable):
        said += " (~REGION = a price read in REGION: the catalog has none for the size where the job runs)"
    if len(usable) > 1:  # a run left waiting where it cannot start (Azure ML's Queued) moves on too
        wait = written(spec.limits.queue_timeout)
        said += f"; a run its platform keeps queued (Azure ML) for limits.queue_timeout ({wait}) is cancelled and "
        said += "moves to the next, as one refused at launch does at once"
    for placement in usable:
        assert placement.plan is not None
        placement.plan.decisions.insert(0, said)
    return ranking


def _ask(name: str, preference: int, spec: JobSpec, *, checks: bool) -> Placement:
    placement = Placement(name, preference, max_runtime_s=float(spec.limits.max_runtime))
    try:
        backend = get_backend(name)
        missing = [m.field for m in backend.missing_settings(spec)]  # those only a launch needs, too
        if missing:
            placement.refused = f"needs {', '.join(missing)} (in the job, or the user configuration)"
            return placement
        plan = backend.render(spec)
    except CloudDDPError as e:
        placement.refused = _said(e)
        return placement
    placement.plan = plan
    placement.cost = plan.estimate.total_cost if plan.estimate else None
    if checks:
        _check(backend, placement, plan)
    return placement


def _check(backend: Backend[Any], placement: Placement, plan: Plan) -> None:
    """The backend's preflight checks, then its start estimate: a failed check sets it aside, with the check's words,
    and its scheduler is not asked (a Slurm that does not answer is not waited for twice)."""
    try:
        failed = [c for c in backend.preflight(plan) if c.ok is False]
        start = None if failed else backend.start_estimate(plan)
    except CloudDDPError as e:
        placement.refused = _first_line(e)
        return
    if failed:
        placement.refused = "; ".join(f"{c.name}: {c.detail}" for c in failed)
    elif start is not None:
        placement.starts_in = max(0.0, start - time.time())


def _first_line(error: Exception) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0]


def _said(error: Exception) -> str:
    """The error's message on one line (a refusal lists what is missing on the lines after its first)."""
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip()) or type(error).__name__


@dataclass(frozen=True)
class Placed:
    """Where ``-b auto`` launched the job, and what it can still move to."""

    placement: Placement
    run_id: str
    rest: list[Placement]
    """The usable placements after it, in rank order: where the recovery watcher moves the run."""
    skipped: list[str]
    """The backends ranked before it that refused the launch, each with the reason."""

    def note(self, ranking: list[Placement]) -> str:
        """How the first attempt came to run where it does, for the run's history."""
        ranked = ", ".join(p.backend for p in ranking if p.usable)
        said = f"placed by -b auto (ranked {ranked})"
        return said + (f"; refused at launch: {', '.join(self.skipped)}" if self.skipped else "")


def launch_first(
    ranking: list[Placement],
    *,
    provision: bool = True,
    progress: Progress | None = None,
    resume_from: Checkpoints | None = None,
    confirm: Confirm | None = None,
) -> Placed:
    """Launch the first usable placement whose backend accepts it (``resume_from``'s checkpoint carried into its
    folder first; ``confirm`` asked with each plan before it is sent); a refusal (a quota, a capacity error, a name
    taken) moves to the next. A UserError naming every backend's reason when none takes it."""
    usable = [p for p in ranking if p.usable]
    skipped: list[str] = []
    for index, placement in enumerate(usable):
        assert placement.plan is not None
        declined_unless(confirm, placement.plan)
        try:
            runner = Runner.open(placement.backend)
            if resume_from is not None:
                runner.carry_in(placement.plan, resume_from, progress)
            run_id = runner.launch(placement.plan, checks=False, provision=provision, progress=progress)
        except CloudDDPError as e:
            skipped.append(f"{placement.backend} ({_first_line(e)})")
            if progress is not None:
                progress.step(f"{placement.backend} refused the launch: {_first_line(e)}; trying the next backend")
            continue
        return Placed(placement, run_id, usable[index + 1 :], skipped)
    refusals = [p.line() for p in ranking if not p.usable] + [f"{s}" for s in skipped]
    raise UserError(
        "-b auto found no backend that takes this job now:\n  " + "\n  ".join(refusals),
        hint="fix what each line says, or choose a backend with -b",
    )
