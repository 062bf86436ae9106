"""The backend contract: what every backend does, with the same meaning everywhere — mechanism only.

A backend subclasses :class:`Backend` (or :class:`~cloudddp.backends.sized.SizedBackend` when the catalog
offers its sizes), declares what it is in class attributes and implements hooks. One naming rule: a **hook**
is a method whose name starts with ``_``; the base class calls it, callers never do. A **verb** is public;
callers (the runner, the faces, tests) call it, and no backend overrides it: the verbs hold the written
semantics below, once. ``docs/writing-a-backend.md`` mirrors both tables (a test holds them to the same names).

Class attributes (``docs/writing-a-backend.md`` has them as a table)
--------------------------------------------------------------------
``name`` (required)
    The entry point's name, the spec section (``<name>:``), ``inputs.X.at.<name>``.
``description`` (required)
    One line for ``cloudddp backends``.
``options_model`` (required)
    The pydantic model of the backend's spec section (a subclass of ``spec.model.Strict``).
``cloud`` (None)
    The catalog cloud its sizes come from (``"aws"``, ``"azure"``), or None.
``capabilities`` (supports all)
    Features it cannot run (refused at render, with the reason) and caveats (plan warnings).
``sigterm_grace`` (30)
    Seconds between SIGTERM and SIGKILL there (``CLOUDDDP_SIGTERM_GRACE``).
``request_type`` (None)
    Its own request class (a :class:`~cloudddp.plan.JsonDataclass`); None: the cloud's native request, a dict.
``target_type`` (:class:`~cloudddp.plan.Folder`)
    Its plans' target class (a :class:`~cloudddp.plan.Target`): what launch needs besides the request, and the
    checkpoint folder.
``spend_while_running`` (False)
    ``_bill`` prices spend while a run goes: the runner enforces ``resources.max_cost`` with its budget watch.
``no_bill_reason``, ``no_budget_reason`` (a sentence each)
    What ``cost`` says when ``_bill`` returns None; why ``resources.max_cost`` is not enforced here.
``watches_stalls`` (False)
    It enforces ``limits.stall_timeout`` itself (elsewhere a spec that sets it gets a warning).
``cpu_size_example`` (``("", "")``, :class:`~cloudddp.backends.sized.SizedBackend` only)
    A CPU size to suggest for a CPU job, and a word about it.

Hooks: required, then optional with their default
-------------------------------------------------
``_render(spec) -> Plan``
    Called by ``render`` after the unsupported features and missing settings are refused.
``_launch(plan, *, provision, progress) -> Launched``
    Called by ``launch`` after the preflight checks.
``_describe(run_id) -> RunStatus | None``
    Called by ``status`` and every verb that checks the run id first.
``_log_iter(run_id, *, follow)``
    Called by ``logs`` and the default ``_metric_iter``.
``_cancel(run_id)``
    Called by ``cancel``, only for a run that has not ended and is not stopping.
``_metric_iter(run_id, *, follow)`` (the metric records in ``_log_iter``'s lines)
    Called by ``metrics``.
``_preflight(plan) -> list[Check]`` (no checks)
    Called by ``preflight``, and ``launch`` unless ``checks=False``.
``_bill(run_id) -> Bill | None`` (None: no figures)
    Called by ``bill`` (``cloudddp cost``, the budget watch).
``_translate(error) -> CloudDDPError | None`` (None: not mapped)
    Called by every verb, for an exception one of its hooks raised.
``_for_attempt(plan, attempt) -> Plan`` (the same plan)
    Called by ``for_attempt``: recovery's next attempt.
``_missing_settings(spec) -> list[MissingSetting]`` (none missing)
    Called by ``missing_settings``: ``render``, ``validate -b``, ``plan``.
``_adopt(run_id) -> bool`` (False: nothing to adopt)
    Called by ``adopt``: the runner, before it reads a status.
``_size_target(spec) -> SizeTarget | None`` (None: no size choice; :class:`~cloudddp.backends.sized.SizedBackend`
requires it)
    Called by ``size_target``: ``plan``, the next-size fallback.
``_recovery_notes(spec) -> (decisions, warnings)`` (a warning that it has no effect)
    Called by ``render``, with ``limits.recover_to: next_size``.
``_checkpoint_store(location, target) -> CheckpointStore | None`` (None: it cannot reach its checkpoints; ``target`` is
``target_type``'s)
    Called by ``checkpoint_store``: a run moving between backends (:mod:`cloudddp.backends.checkpoints.carry`).
``_start_estimate(plan) -> float | None`` (None: it cannot say)
    Called by ``start_estimate``: ``-b auto``'s ranking (:mod:`cloudddp.runs.placement`).
``_avoiding(plan, hosts) -> Plan`` (the same plan)
    Called by ``avoiding``: a hang's recovery, without the host the verdict blamed.
``_stacks(run_id) -> Capture`` (a UserError: not on this backend yet)
    Called by ``stacks``, only for a running run: ``cloudddp stacks``.

Verbs
-----
``render(spec) -> Plan``
    Pure: no network, no credentials, no cloud SDK import. Refuses, in one message, every feature the spec
    uses that the backend declares unsupported (with the backend's reason), and every setting it needs and
    the spec (or the environment) does not give (:meth:`Backend.missing_settings`, each with an example
    value: a newcomer learns them all at once, not one per try); caveats become plan warnings, and
    so do the estimate against ``resources.max_cost`` and, with ``limits.recover_to: next_size``, the sizes a
    recovery would move to (the catalog's ranking).
``launch(plan, ...) -> run id``
    Preflight checks (a failed check raises :class:`PreflightFailed` unless ``checks=False``), then sends
    exactly the plan; never reads the spec again. Records the run in the run records the backend was given
    (what it needs to find the run again, and the plan's estimate, metrics and step key). Idempotent where the
    target allows it: a retried launch of the same plan finds its run instead of starting another.
``status(run_id) -> RunStatus``
    Free of side effects. An unknown id raises :class:`~cloudddp.errors.RunNotFound` (the same on every
    backend).
``logs(run_id, follow=False) -> Iterator[LogLine]``
    Every line the run's processes printed so far, each tagged with where it came from; with ``follow``,
    the iterator goes on yielding new lines and ends when the run has ended and its last lines are out.
``metrics(run_id, follow=False) -> Iterator[MetricRecord]``
    The metric records in those lines, with the same ending rule.
``cancel(run_id) -> bool``
    Idempotent: True when a stop was requested (or is already under way), False when the run had already ended
    (not an error).
``preflight(plan) -> list[Check]``
    Checks that need the target (credentials, quota, data reachable); ``doctor`` prints them.
``bill(run_id) -> Bill | None``
    What the run cost so far (final once it has ended), from the backend's own figures, each with its source;
    None when the backend cannot say (``no_bill_reason`` says why). Free of side effects; an unknown id raises
    :class:`~cloudddp.errors.RunNotFound`.
``adopt(run_id) -> bool``
    Supervise the run again when what supervised it on this machine is gone; not free of side effects.
``for_attempt(plan, attempt) -> Plan`` · ``avoiding(plan, hosts) -> Plan`` · ``restore(state, literals) -> Plan``
    A recovery's next attempt, one without the hosts a hang blamed; a plan saved with ``Plan.to_state``, read back.
``start_estimate(plan) -> float | None``
    When the plan's job would start if it were submitted now (a Unix time), where the backend can say without
    submitting it (Slurm's ``sbatch --test-only``); None when it cannot.
``stacks(run_id) -> Capture``
    Every rank's Python stacks now (:class:`~cloudddp.injob.culprit.Capture`), each rank once, the run left running.
``checkpoint_store(target) -> CheckpointStore``
    The checkpoint folder a plan's (or a run record's) ``target`` names, to read and write as files: what a run
    moving to or from this backend carries (:mod:`cloudddp.backends.checkpoints.store`).
``missing_settings(spec)`` · ``size_target(spec)`` · ``options(spec)`` · ``metric_patterns(run_id)`` ·
``metric_ranks(run_id)`` · ``check_launch_options(provision)``
    What the spec lacks; where sizes come from; the backend's spec section; how a run reads its metrics; whether
    ``--no-provision`` applies.

The verbs with policy — ``submit`` (render, preflight, launch, the budget watch), ``cost``, ``list``,
recovery and the next-size fallback — are the runner's (:mod:`cloudddp.runs`), above every backend: nothing
here imports it. A backend is given the run records to keep (``records=``, any
:class:`~cloudddp.backends.records.RunRecords`: the runner passes this machine's run database); without one it keeps
them in memory for its own lifetime.

Each backend maps its SDK's exceptions to cloudddp's in one place (``_translate``); every verb runs its hook
under that mapping, so a missing credential is a message with exit code 2, never a traceback.

The value types a plugin uses are importable from here and from :mod:`.status`, :mod:`.checks`, :mod:`.records`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from pydantic import BaseModel

from cloudddp.backends.budget_notes import budget_warnings
from cloudddp.backends.checkpoints.contents import resume_notes
from cloudddp.backends.checkpoints.store import CheckpointStore
from cloudddp.backends.checks import Check, MissingSetting, PreflightFailed, SettingsMissing
from cloudddp.backends.features import Capabilities, Feature, features_used
from cloudddp.backends.records import LaunchInfo, MemoryRecords, RunRecord, RunRecords
from cloudddp.backends.status import Cause, LogLine, RunState, RunStatus
from cloudddp.catalog.bill import Bill
from cloudddp.catalog.target import SizeTarget
from cloudddp.errors import CloudDDPError, RunNotFound, UserError
from cloudddp.injob.culprit import Capture
from cloudddp.observe.metrics import RANK_ZERO, MetricRecord, Pattern, metrics_from_lines, patterns_from
from cloudddp.plan import Folder, JsonDataclass, Plan, Target
from cloudddp.spec.model import JobSpec, job_key


@dataclass(frozen=True)
class Launched:
    """What a backend's launch hook reports: the run id and what the run record keeps to find it again."""

    run_id: str
    info: dict[str, Any] = field(default_factory=dict)


class Progress(Protocol):
    """What long work reports to; the CLI draws it, the API may pass nothing."""

    def planned(self, plan: Plan[Any, Any]) -> None:
        """The plan is rendered (its decisions and warnings are worth showing before anything is sent)."""

    def step(self, description: str) -> None: ...

    def advance(self, description: str, done: int, total: int | None) -> None: ...


OptionsT = TypeVar("OptionsT", bound=BaseModel)


class Backend(abc.ABC, Generic[OptionsT]):
    name: ClassVar[str]
    description: ClassVar[str]
    options_model: ClassVar[type[BaseModel]]
    cloud: ClassVar[str | None] = None
    capabilities: ClassVar[Capabilities] = Capabilities()
    sigterm_grace: ClassVar[int] = 30
    request_type: ClassVar[type[JsonDataclass] | None] = None
    target_type: ClassVar[type[Target]] = Folder
    spend_while_running: ClassVar[bool] = False
    no_bill_reason: ClassVar[str] = "this backend reports no figures about what a run cost (it has no _bill hook)"
    no_budget_reason: ClassVar[str] = "it cannot report what a run spends while it is going"
    watches_stalls: ClassVar[bool] = False
    records: RunRecords

    def __init__(self, *, records: RunRecords | None = None) -> None:
        self.records = records if records is not None else MemoryRecords()

    # -- the hooks a backend implements (required) -------------------------------------------------
    @abc.abstractmethod
    def _render(self, spec: JobSpec) -> Plan[Any, Any]: ...

    @abc.abstractmethod
    def _launch(self, plan: Plan[Any, Any], *, provision: bool, progress: Progress | None) -> Launched: ...

    @abc.abstractmethod
    def _describe(self, run_id: str) -> RunStatus | None:
        """The run's status, or None when the backend has no such run."""

    @abc.abstractmethod
    def _log_iter(self, run_id: str, *, follow: bool) -> Iterator[LogLine]: ...

    @abc.abstractmethod
    def _cancel(self, run_id: str) -> None:
        """Ask the run to stop (SIGTERM first, so the script can checkpoint); called only for a live run."""

    # -- the hooks a backend may override (optional) ---------------------------------------------
    def _metric_iter(self, run_id: str, *, follow: bool) -> Iterator[MetricRecord]:
        """Metric records parsed from the run's log lines (the same on every backend): global rank 0's, or every
        rank's with ``metrics.ranks: all``."""
        return metrics_from_lines(
            self._log_iter(run_id, follow=follow), self.metric_patterns(run_id), self.metric_ranks(run_id)
        )

    def _preflight(self, plan: Plan[Any, Any]) -> list[Check]:
        """Checks that need the target; a failed one stops a launch (unless ``checks=False``)."""
        return []

    def _bill(self, run_id: str) -> Bill | None:
        """What run ``run_id`` cost so far, from this backend's own figures; None when it cannot say."""
        return None

    def _translate(self, error: Exception) -> CloudDDPError | None:
        """This backend's SDK error as cloudddp's (e.g. a missing credential as a BackendUnavailable), or None."""
        return None

    def _for_attempt(self, plan: Plan[Any, Any], attempt: int) -> Plan[Any, Any]:
        """``plan`` for a recovery's ``attempt`` (2, 3, ...): what must differ between attempts (a cloud's job
        name, which must be unique), with the attempt in its tags; the same code, data and checkpoints.
        A backend whose run ids are fresh at every launch needs nothing (the default)."""
        return plan

    def _missing_settings(self, spec: JobSpec) -> list[MissingSetting]:
        """Every setting this backend needs for ``spec`` that the spec and the environment leave out (offline:
        nothing is looked up). Those with ``needed_to_render`` stop a render; ``validate -b`` reports them all."""
        return []

    def _adopt(self, run_id: str) -> bool:
        """Start supervising ``run_id`` again when the process of this machine that supervised it is gone while the
        run is not recorded as ended; True when a new supervisor was started. Backends whose runs the platform
        supervises have nothing to adopt (the default)."""
        return False

    def _size_target(self, spec: JobSpec) -> SizeTarget | None:
        """Where this backend's sizes come from for ``spec`` (None: the backend chooses no size)."""
        return None

    def _recovery_notes(self, spec: JobSpec) -> tuple[list[str], list[str]]:
        """What the plan says about ``limits.recover_to: next_size`` (decisions, warnings): here, that it has no
        effect; a backend that chooses sizes names where a recovery would move (:class:`~.sized.SizedBackend`)."""
        if spec.limits.recover_to != "next_size":
            return [], []
        return [], [f"limits.recover_to: next_size has no effect on the {self.name} backend: it chooses no size"]

    def _checkpoint_store(self, location: str, target: Any) -> CheckpointStore | None:
        """The checkpoint folder ``location`` (as this backend's plans name it in ``target``), opened for a run
        that moves between backends; None: this backend cannot reach its checkpoints from here."""
        return None

    def _start_estimate(self, plan: Plan[Any, Any]) -> float | None:
        """When ``plan``'s job would start if submitted now (Unix time), asked without submitting it; None: this
        backend cannot say (a cloud starts a job when it has the capacity, which it does not forecast)."""
        return None

    def _avoiding(self, plan: Plan[Any, Any], hosts: Sequence[str]) -> Plan[Any, Any]:
        return plan

    def _stacks(self, run_id: str) -> Capture:
        """Every rank's stacks now, each rank once, the run left running (:mod:`cloudddp.injob.rank_stacks`)."""
        raise UserError(f"cloudddp stacks is not yet on the {self.name} backend", hint="cloudddp logs RUN")

    # -- the verbs -------------------------------------------------------------------------------
    def render(self, spec: JobSpec) -> Plan[Any, Any]:
        used = features_used(spec, self.name)
        refused = [f"{f.value}: {why}" for f, why in self.capabilities.unsupported.items() if f in used]
        if refused:
            raise UserError(
                f"the {self.name} backend cannot run this job:\n  " + "\n  ".join(refused),
                hint="change the spec (or override it with -o), or choose another backend",
            )
        missing = [m for m in self.missing_settings(spec) if m.needed_to_render]
        if missing:
            raise SettingsMissing(self.name, missing)
        with mapped_errors(self):
            plan = self._render(spec)
        plan.warnings += [f"{f.value}: {why}" for f, why in self.capabilities.caveats.items() if f in used]
        plan.decisions += spec.settings_notes(self.name) + resume_notes(spec)
        plan.metrics = [m.model_dump() for m in spec.metrics.declared]
        plan.metric_ranks = spec.metrics.ranks
        plan.step_key = job_key(spec)
        decisions, warnings = self._recovery_notes(spec)
        plan.decisions += decisions
        plan.warnings += warnings
        plan.max_cost = spec.resources.max_cost
        plan.warnings += budget_warnings(plan, self.name, self.spend_while_running, self.no_budget_reason)
        if spec.limits.stall_timeout not in (None, "off") and not self.watches_stalls:
            plan.warnings.append(
                f"limits.stall_timeout is not enforced on {self.name} (only the local supervisor watches for "
                "stalls): a stuck rank fails the job after distribution.collective_timeout if the script passes "
                "it to init_process_group, else at limits.max_runtime"
            )
        return plan

    def launch(
        self, plan: Plan[Any, Any], *, checks: bool = True, provision: bool = True, progress: Progress | None = None
    ) -> str:
        if plan.backend != self.name:
            raise UserError(f"this plan was rendered for the {plan.backend} backend, not {self.name}")
        self.check_launch_options(provision)
        plan.secret_values()  # a variable env.X.from_env names but the shell lacks, a short secret: before any change
        if checks:
            failed = [c for c in self.preflight(plan) if c.ok is False]
            if failed:
                raise PreflightFailed(failed)
        with mapped_errors(self):
            launched = self._launch(plan, provision=provision, progress=progress)
        if self.records.get(launched.run_id) is None:
            info = {**launched.info, **LaunchInfo.of(plan).to_dict()}
            self.records.add(launched.run_id, self.name, plan.job_name, RunState.PENDING.value, info)
        return launched.run_id

    def preflight(self, plan: Plan[Any, Any]) -> list[Check]:
        with mapped_errors(self):
            return self._preflight(plan)

    def status(self, run_id: str) -> RunStatus:
        with mapped_errors(self):
            found = self._describe(run_id)
        if found is None:
            raise RunNotFound(
                f"no {self.name} run {run_id!r}", hint="`cloudddp list` shows the runs started from this machine"
            )
        return found

    def logs(self, run_id: str, *, follow: bool = False) -> Iterator[LogLine]:
        require(self, Feature.FOLLOW_LOGS if follow else None)
        self.status(run_id)  # an unknown id fails here, before the first line
        return mapped_iter(self, lambda: self._log_iter(run_id, follow=follow))

    def metrics(self, run_id: str, *, follow: bool = False) -> Iterator[MetricRecord]:
        require(self, Feature.FOLLOW_LOGS if follow else None)
        self.status(run_id)
        return mapped_iter(self, lambda: self._metric_iter(run_id, follow=follow))

    def cancel(self, run_id: str) -> bool:
        require(self, Feature.CANCEL)
        state = self.status(run_id).state
        if state.terminal:
            return False
        if state is RunState.STOPPING:
            return True  # a stop is under way: asked again, it is not sent again (a cloud refuses a second one)
        with mapped_errors(self):
            self._cancel(run_id)
        return True

    def stacks(self, run_id: str) -> Capture:
        state = self.status(run_id).state
        if state is not RunState.RUNNING:
            raise UserError(f"run {run_id} is {state.value}: only a running run's ranks have stacks to show")
        with mapped_errors(self):
            return self._stacks(run_id)

    def adopt(self, run_id: str) -> bool:
        """Start supervising ``run_id`` again when its supervisor on this machine is gone (see ``_adopt``). Not free
        of side effects, unlike ``status``: the runner calls it before it reads a status (and a backend's own
        followers of logs and metrics may, while they wait)."""
        with mapped_errors(self):
            return self._adopt(run_id)

    def bill(self, run_id: str) -> Bill | None:
        self.status(run_id)  # an unknown id fails here
        with mapped_errors(self):
            return self._bill(run_id)

    def for_attempt(self, plan: Plan[Any, Any], attempt: int) -> Plan[Any, Any]:
        """``plan`` for a recovery's ``attempt`` (2, 3, ...): the same code, data and checkpoints, with what must
        differ between attempts changed by the backend (``_for_attempt``)."""
        return self._for_attempt(plan, attempt)

    def avoiding(self, plan: Plan[Any, Any], hosts: Sequence[str]) -> Plan[Any, Any]:
        """``plan`` launched without ``hosts`` (where a rank of the attempt before hung), where the backend picks
        hosts it can name (``_avoiding``); as it is elsewhere (a cloud's next job gets fresh hosts)."""
        return self._avoiding(plan, hosts) if hosts else plan

    def restore(self, state: Mapping[str, Any], literals: Mapping[str, str] | None = None) -> Plan[Any, Any]:
        """A plan :meth:`~cloudddp.plan.Plan.to_state` saved, its request read back as this backend's type;
        ``literals``: the values of the secrets the spec gave as literals (never stored)."""
        return Plan.from_state(state, literals, self.request_type, self.target_type)

    def start_estimate(self, plan: Plan[Any, Any]) -> float | None:
        with mapped_errors(self):
            return self._start_estimate(plan)

    def checkpoint_store(self, target: Target | Mapping[str, Any]) -> CheckpointStore:
        """The checkpoint folder ``target`` names (a plan's, or what a run's record keeps of it)."""
        target = self.target_of(target)
        location = target.checkpoints
        if location is None:
            raise UserError(f"this {self.name} run keeps no checkpoints (checkpoint.enabled is false)")
        with mapped_errors(self):
            store = self._checkpoint_store(location, target)
        if store is None:
            raise UserError(f"the {self.name} backend cannot carry checkpoints to or from another backend")
        return store

    def target_of(self, target: Target | Mapping[str, Any]) -> Target:
        """``target`` as this backend's :attr:`target_type` (a run's record keeps it as data)."""
        return target if isinstance(target, Target) else self.target_type.from_fields(target)

    def missing_settings(self, spec: JobSpec) -> list[MissingSetting]:
        """Every setting this backend needs for ``spec`` that the spec and the environment leave out."""
        return self._missing_settings(spec)

    def size_target(self, spec: JobSpec) -> SizeTarget | None:
        """Where this backend's sizes come from for ``spec`` (None: the backend chooses no size)."""
        return self._size_target(spec)

    def options(self, spec: JobSpec) -> OptionsT:
        """This backend's section of ``spec``."""
        section: OptionsT = spec.section(self.name)
        return section

    def metric_patterns(self, run_id: str) -> list[Pattern]:
        """The metrics run ``run_id`` declared by regular expression (kept in this machine's run database)."""
        record = self.records.get(run_id)
        return patterns_from(list(LaunchInfo.from_fields(record.info).metrics)) if record else []

    def metric_ranks(self, run_id: str) -> str:
        """Whose lines run ``run_id`` reads metrics from: ``"0"`` (global rank 0's) or ``"all"``."""
        record = self.records.get(run_id)
        return LaunchInfo.from_fields(record.info).metric_ranks if record else RANK_ZERO

    def check_launch_options(self, provision: bool) -> None:
        """A UserError for ``provision=False`` on a backend that cannot leave its clusters alone."""
        if not provision and not self.capabilities.supports(Feature.PROVISION):
            raise UserError(
                f"--no-provision: {self.capabilities.unsupported[Feature.PROVISION]}",
                hint="drop --no-provision for this backend",
            )


# -- what the verbs share (machinery, not hooks) ------------------------------------------------------
def require(backend: Backend[Any], feature: Feature | None) -> None:
    """A UserError when ``backend`` cannot do ``feature`` (None: nothing asked)."""
    if feature is not None and not backend.capabilities.supports(feature):
        raise UserError(f"{backend.name} cannot {feature.value}: {backend.capabilities.unsupported[feature]}")


@contextmanager
def mapped_errors(backend: Backend[Any]) -> Iterator[None]:
    """Run a hook with ``backend``'s SDK errors mapped to cloudddp's (its ``_translate``)."""
    try:
        yield
    except CloudDDPError:
        raise
    except Exception as e:
        mapped = backend._translate(e)
        if mapped is None:
            raise
        raise mapped from None


def mapped_iter(backend: Backend[Any], make: Callable[[], Iterator[Any]]) -> Iterator[Any]:
    """A generator hook with errors mapped, including those raised while it is iterated."""
    with mapped_errors(backend):
        yield from make()


__all__ = [
    "Backend",
    "Cause",
    "Check",
    "Launched",
    "LogLine",
    "MemoryRecords",
    "MissingSetting",
    "OptionsT",
    "PreflightFailed",
    "Progress",
    "RunRecord",
    "RunRecords",
    "RunState",
    "RunStatus",
    "SettingsMissing",
]
