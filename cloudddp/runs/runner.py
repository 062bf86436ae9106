"""The runner: the verbs with policy, above every backend.

A backend (:mod:`cloudddp.backends.base`) is mechanism: render, launch, describe, logs, cancel, bill. The
runner adds what a person means by submitting and looking after a run, the same for every backend:

``submit(spec, checks=True, provision=True, progress=None) -> Submission``
    ``render`` + preflight checks (a failed check raises :class:`~cloudddp.backends.base.PreflightFailed`
    unless ``checks=False``) + ``launch``. The CLI and the Python API both submit through it.
``launch(plan, ...) -> run id``
    The backend's launch (which records the run in this machine's run database), then, for a plan with
    ``resources.max_cost`` on a backend whose bill reports spend while a run is going, the budget watch: a
    detached ``python -m cloudddp.runs.budget RUN_ID`` that cancels the run — so it checkpoints first — when its
    spend and what stopping still costs reach the budget. The recovery watcher launches its attempts here too.
``cost(run_id) -> CostReport``
    The backend's ``bill`` next to the estimate the plan had at submit (kept in its run record at launch), the
    budget and what the budget watch did; without a bill, the reason.
``status(run_id) -> RunStatus``
    The backend's status (a run whose supervisor is gone is adopted first), with this machine's record brought up
    to date (and a run seen ending teaches its step time); :func:`current_states` does it for many runs at once,
    for ``cloudddp list``.
``list(limit) -> list[RunStatus]``
    This backend's runs from this machine's run database, each with its current status.
``learn(run_id)``
    Keep a finished run's measured step time for the next estimate (:mod:`cloudddp.runs.steptimes`).

Recovery (:mod:`cloudddp.runs.recovery`) sits on top of the runner: it resubmits through :meth:`Runner.launch`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from cloudddp.backends.base import Backend, Progress
from cloudddp.backends.checkpoints.carry import carried_to
from cloudddp.backends.plugins import backend_class
from cloudddp.backends.records import LaunchInfo, RunRecord
from cloudddp.backends.status import RunState, RunStatus
from cloudddp.errors import CloudDDPError, Declined, RunNotFound, UserError
from cloudddp.paths import home
from cloudddp.plan import Estimate, JsonDataclass, Plan, Target
from cloudddp.runs import resumed, steptimes
from cloudddp.runs.cost import CostReport
from cloudddp.runs.database import RunDatabase
from cloudddp.runs.notes import noted
from cloudddp.spec.model import JobSpec

BUDGET_POLL_ENV = "CLOUDDDP_BUDGET_POLL"
TERMINAL_STATES = frozenset(s.value for s in RunState if s.terminal)


@dataclass(frozen=True)
class Checkpoints:
    """Where a run keeps its checkpoints: what ``submit --resume-from`` carries from."""

    run_id: str
    backend: Backend[Any]
    target: Target
    """The run's target as its launch recorded it (``target.checkpoints``: the folder)."""


Confirm = Callable[[Plan], bool]
"""Asked with each plan about to launch; False: do not send it (:class:`~cloudddp.errors.Declined`)."""


@dataclass(frozen=True, kw_only=True)
class RunnerInfo(JsonDataclass):
    """What the runner keeps in a run's record beside the launch's keys (:class:`LaunchInfo`): what the budget
    watch did, the step time learned from the run, and what a ``--resume-from`` carried in."""

    budget: dict[str, Any] = field(default_factory=dict)
    """The budget watch's pid, log and poll, then what it did (``stopped_at_cost``, ``failed``, ``message``)."""
    measured: dict[str, Any] | None = None
    """The step time kept for the next estimate, or why none (:mod:`cloudddp.runs.steptimes`)."""
    resumed_from: str | None = None
    carried: str | None = None


@dataclass(frozen=True)
class Submission:
    plan: Plan
    run_id: str


def get_backend(name: str, *, records: RunDatabase | None = None, **options: Any) -> Backend[Any]:
    """The backend called ``name``, keeping its runs in ``records`` (this machine's by default), constructed
    with its own ``options`` (e.g. a credential for a cloud)."""
    return backend_class(name)(records=records if records is not None else RunDatabase(), **options)


class Runner:
    """The policies over one backend: submit, launch with the budget watch, cost, list, learn."""

    def __init__(self, backend: Backend[Any], *, watch_budget: bool = True) -> None:
        self.backend = backend
        self.watch_budget = watch_budget
        """Start the detached budget watch at launch (False: the caller watches, e.g. ``budget.watch``)."""

    @classmethod
    def open(cls, name: str, *, watch_budget: bool = True, **options: Any) -> Runner:
        """The runner of backend ``name`` (see :func:`get_backend` for ``options``)."""
        return cls(get_backend(name, **options), watch_budget=watch_budget)

    @property
    def name(self) -> str:
        return self.backend.name

    def render(self, spec: JobSpec) -> Plan:
        return self.backend.render(spec)

    def submit(
        self,
        spec: JobSpec,
        *,
        checks: bool = True,
        provision: bool = True,
        progress: Progress | None = None,
        resume_from: Checkpoints | None = None,
        confirm: Confirm | None = None,
    ) -> Submission:
        """Render, check and launch ``spec``; with ``resume_from``, another run's latest checkpoint is carried into
        this plan's checkpoint folder first (``submit --resume-from``); ``confirm`` is asked with the plan before
        anything is sent (False: :class:`~cloudddp.errors.Declined`)."""
        self.backend.check_launch_options(provision)
        plan = self.backend.render(spec)
        if progress is not None:
            progress.planned(plan)
        declined_unless(confirm, plan)
        carried = self.carry_in(plan, resume_from, progress) if resume_from else ""
        run_id = self.launch(plan, checks=checks, provision=provision, progress=progress)
        if resume_from:
            self.backend.records.update(run_id, info={"resumed_from": resume_from.run_id, "carried": carried})
        return Submission(plan, run_id)

    def carry_in(self, plan: Plan, source: Checkpoints, progress: Progress | None = None) -> str:
        """Carry ``source``'s latest checkpoint into ``plan``'s checkpoint folder; what was carried, in words."""
        if plan.target.checkpoints is None:
            raise UserError(f"--resume-from {source.run_id}: this job keeps no checkpoints (checkpoint.enabled)")
        if progress is not None:
            progress.step(f"carrying {source.run_id}'s latest checkpoint from {source.backend.name} to {self.name}")
        carried = carried_to(source.backend, source.target, self.backend, plan.target, progress)
        return carried or f"{source.run_id}'s checkpoint folder is this run's own: nothing to carry"

    def launch(
        self, plan: Plan, *, checks: bool = True, provision: bool = True, progress: Progress | None = None
    ) -> str:
        backend = self.backend
        run_id = backend.launch(plan, checks=checks, provision=provision, progress=progress)
        record = backend.records.get(run_id)
        watched = record is not None and bool(RunnerInfo.from_fields(record.info).budget)  # a retried launch
        if plan.max_cost is not None and backend.spend_while_running and self.watch_budget and not watched:
            backend.records.update(run_id, info={"budget": start_budget_watch(run_id)})
        return run_id

    def cost(self, run_id: str) -> CostReport:
        backend = self.backend
        status = backend.status(run_id)
        record = backend.records.get(run_id)
        launched = LaunchInfo.from_fields(record.info if record else {})
        kept = RunnerInfo.from_fields(record.info if record else {})
        bill = backend.bill(run_id)
        reasons = [] if bill is not None else [backend.no_bill_reason]
        if record is None:
            reasons.append("this machine's run database does not have the run, so its estimate at submit is unknown")
        elif launched.estimate is None:
            reasons.append(
                "the plan had no estimate at submit (its warnings say why; the next run of this job is "
                "estimated from this one's measured step time)"
            )
        return CostReport(
            run_id,
            backend.name,
            status.state.value,
            Estimate.from_dict(launched.estimate) if launched.estimate else None,
            bill,
            "; ".join(reasons),
            max_cost=launched.max_cost,
            budget=dict(kept.budget),
            measured=kept.measured,
        )

    def status(self, run_id: str, *, notes: bool = False) -> RunStatus:
        """The run's status now. This machine's record follows it, and a run seen ending here teaches its step
        time (:meth:`learn`; when its logs cannot be read now, a later status or cost tries again). A run whose
        supervisor on this machine is gone gets a new one first (:meth:`~cloudddp.backends.base.Backend.adopt`).
        ``notes``: a running run's straggler and interconnect result in ``details``, where its log is near
        (:mod:`~cloudddp.runs.notes`): for a person's look, not a watcher's poll."""
        with contextlib.suppress(CloudDDPError):
            self.backend.adopt(run_id)
        status = self.backend.status(run_id)
        record = self.backend.records.get(run_id)
        status = _standing(status, record)
        if notes and self.backend.cloud is None:
            status = noted(status, lambda: self.backend.logs(run_id))
        status, note = resumed.explained(status, record, functools.partial(self._reported, run_id))
        if record is not None and status.state.terminal and resumed.NOTE not in record.info:
            self.backend.records.update(run_id, info={resumed.NOTE: note})
        if record is not None and record.state != status.state.value:
            self.backend.records.update(run_id, state=status.state.value)
            if status.state.terminal:
                with contextlib.suppress(CloudDDPError):
                    self.learn(run_id)
        return status

    def _reported(self, run_id: str) -> bool:
        """Whether the run reported a metric record (an unreadable log: as if it did, so nothing is claimed)."""
        try:
            return any(True for _ in self.backend.metrics(run_id))
        except CloudDDPError:
            return True

    def list(self, database: RunDatabase, limit: int = 100) -> list[RunStatus]:
        """This backend's runs from ``database``, each with its current status."""
        out = []
        for record in database.list(backend=self.backend.name, limit=limit):
            try:
                out.append(_standing(self.backend.status(record.run_id), record))
            except RunNotFound:
                continue
        return out

    def learn(self, run_id: str) -> dict[str, Any] | None:
        """Keep finished run ``run_id``'s measured step time (see :func:`cloudddp.runs.steptimes.learn`)."""
        return steptimes.learn(self.backend, run_id)


@dataclass(frozen=True)
class Seen:
    """A run of the run database with the state it has now, or the state last seen when it could not be asked."""

    record: RunRecord
    state: str
    refreshed: bool
    """False: the backend could not be asked now (``reason`` says why); ``state`` is the one last seen."""
    reason: str = ""


def current_states(records: Sequence[RunRecord], *, workers: int = 8) -> list[Seen]:
    """``records`` with their current states: each run that had not ended when last seen is asked of its backend
    (concurrently, at most ``workers`` at a time), and its record follows the answer. A run whose backend cannot
    answer now (no credentials here, the cloud unreachable, the run gone) keeps its last seen state, marked."""
    live = [r for r in records if r.state not in TERMINAL_STATES]
    runners: dict[str, Runner] = {}
    lock = threading.Lock()

    def runner_of(backend: str) -> Runner:
        with lock:
            if backend not in runners:
                runners[backend] = Runner.open(backend)
            return runners[backend]

    def look(record: RunRecord) -> Seen:
        try:
            return Seen(record, runner_of(record.backend).status(record.run_id).state.value, True)
        except CloudDDPError as e:
            return Seen(record, record.state, False, str(e).splitlines()[0])

    if not live:
        return [Seen(r, r.state, True) for r in records]
    with ThreadPoolExecutor(max_workers=min(workers, len(live))) as pool:
        found = {seen.record.run_id: seen for seen in pool.map(look, live)}
    return [found.get(r.run_id, Seen(r, r.state, True)) for r in records]


def declined_unless(confirm: Confirm | None, plan: Plan) -> None:
    """:class:`~cloudddp.errors.Declined` when ``confirm`` says no to ``plan`` (None: nobody is asked)."""
    if confirm is not None and not confirm(plan):
        raise Declined(f"not submitted: nothing was sent to {plan.backend}")


def start_budget_watch(run_id: str) -> dict[str, Any]:
    """Start the detached budget watch of ``run_id`` (its backend and budget are read from its run record)."""
    folder = home() / "budget"
    folder.mkdir(exist_ok=True)
    log_path = folder / f"{run_id}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cloudddp.runs.budget", run_id],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return {"watch_pid": proc.pid, "log": str(log_path), "poll_s": budget_poll_seconds()}


def budget_poll_seconds() -> float:
    """Seconds between two looks at a run's bill: ``CLOUDDDP_BUDGET_POLL``, default 60."""
    return float(os.environ.get(BUDGET_POLL_ENV, "60"))


def _standing(status: RunStatus, record: RunRecord | None) -> RunStatus:
    """``status``, unless the backend no longer knows a run this machine saw end (Slurm's MinJobAge without
    accounting, a cloud's retention): a known end is never downgraded to unknown."""
    if record is None or status.state is not RunState.UNKNOWN:
        return status
    try:
        seen = RunState(record.state)
    except ValueError:
        return status
    if not seen.terminal:
        return status
    return dataclasses.replace(status, state=seen, message=f"{seen.value} when last seen; {status.message}")
