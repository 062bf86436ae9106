"""The backend contract: what every backend does, with the same meaning everywhere — mechanism only.

A backend subclasses :class:`Backend`, declares what it is (``name``, ``description``, ``cloud``,
``options_model``, ``capabilities``, ``sigterm_grace``) and implements the private hooks. The public verbs
live here, once, with their written semantics:

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
    :class:`~cloudddp.errors.RunNotFound`. Implemented by the optional ``_bill`` hook.

The verbs with policy — ``submit`` (render, preflight, launch, the budget watch), ``cost``, ``list``,
recovery and the next-size fallback — are the runner's (:mod:`cloudddp.runs`), above every backend: nothing
here imports it. A backend is given the run records to keep (``registry=``, any :class:`RunRecords`: the
runner passes this machine's registry); without one it keeps them in memory for its own lifetime.

Budgets: a backend whose ``_bill`` reports spend while a run is going sets ``spend_while_running``; the runner
then starts the budget watch at launch.

Each backend maps its SDK's exceptions to cloudddp's in one place (:meth:`Backend._translate`); every
verb runs its hook under that mapping, so a missing credential is a message with exit code 2, never a
traceback.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from pydantic import BaseModel

from cloudddp.backends.features import Capabilities, Feature, features_used
from cloudddp.catalog.bill import Bill
from cloudddp.catalog.target import SizeTarget
from cloudddp.errors import CloudDDPError, RunNotFound, UserError
from cloudddp.observe.metrics import RANK_ZERO, MetricRecord, Pattern, metrics_from_lines, patterns_from
from cloudddp.plan import Plan
from cloudddp.spec.model import JobSpec, is_shared_script, job_key


@dataclass
class RunRecord:
    """What is kept about a run on this machine: how to find it again, and what its plan said at launch."""

    run_id: str
    backend: str
    name: str
    state: str
    created_at: float
    updated_at: float
    info: dict[str, Any] = field(default_factory=dict)


class RunRecords(Protocol):
    """Where a backend keeps its runs' records (the runner gives it :class:`cloudddp.runs.registry.Registry`)."""

    def get(self, run_id: str) -> RunRecord | None: ...

    def add(self, run_id: str, backend: str, name: str, state: str, info: dict[str, Any] | None = None) -> None: ...

    def update(self, run_id: str, *, state: str | None = None, info: dict[str, Any] | None = None) -> None: ...


class MemoryRecords:
    """Run records kept in memory: a backend constructed without a registry (a plugin's test, a render)."""

    def __init__(self) -> None:
        self._records: dict[str, RunRecord] = {}

    def get(self, run_id: str) -> RunRecord | None:
        return self._records.get(run_id)

    def add(self, run_id: str, backend: str, name: str, state: str, info: dict[str, Any] | None = None) -> None:
        now = time.time()
        self._records.setdefault(run_id, RunRecord(run_id, backend, name, state, now, now, dict(info or {})))

    def update(self, run_id: str, *, state: str | None = None, info: dict[str, Any] | None = None) -> None:
        record = self._records.get(run_id)
        if record is None:
            return
        record.state = state or record.state
        record.info.update(info or {})
        record.updated_at = time.time()


class RunState(str, Enum):
    PENDING = "pending"  # accepted, waiting for capacity or a queue
    STARTING = "starting"  # provisioning, pulling images, rendezvous
    RUNNING = "running"
    STOPPING = "stopping"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"

    @property
    def terminal(self) -> bool:
        return self in (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED)


class Cause(str, Enum):
    """Why a run ended without succeeding, as its backend reports it; recovery resubmits only what the
    job itself did not cause."""

    PREEMPTED = "preempted"  # spot / low priority capacity taken back, a Slurm preemption
    CAPACITY = "capacity"  # no capacity for the size (now), quota reached at start
    INFRASTRUCTURE = "infrastructure"  # a node or host lost, the platform's own error
    USER_ERROR = "user error"  # the script failed (a traceback, a non-zero exit, a bad argument)
    LIMIT = "limit"  # the job ran into limits.max_runtime
    STALLED = "stalled"  # no rank printed anything for limits.stall_timeout (a hang): not retried
    CANCELLED = "cancelled"  # someone cancelled it
    UNKNOWN = "unknown"

    @property
    def recoverable(self) -> bool:
        return self in (Cause.PREEMPTED, Cause.CAPACITY, Cause.INFRASTRUCTURE)


@dataclass
class RunStatus:
    run_id: str
    backend: str
    state: RunState
    name: str = ""
    native_state: str = ""
    message: str = ""
    created_at: float | None = None
    ended_at: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    cause: Cause | None = None
    """Why it ended, for a run that failed or was cancelled."""

    def _repr_html_(self) -> str:
        import html

        colour = {"succeeded": "#15803d", "failed": "#b91c1c", "cancelled": "#a16207"}.get(self.state.value, "#1d4ed8")
        return (
            f"<span style='background:{colour};color:white;padding:1px 6px;border-radius:4px'>"
            f"{self.state.value}</span> "
            f"<code>{html.escape(self.run_id)}</code> ({html.escape(self.backend)}) {html.escape(self.message)}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "backend": self.backend,
            "name": self.name,
            "state": self.state.value,
            "native_state": self.native_state,
            "message": self.message,
            "created_at": self.created_at,
            "ended_at": self.ended_at,
            "cause": self.cause.value if self.cause else None,
            "details": self.details,
        }


@dataclass(frozen=True)
class LogLine:
    source: str
    """Where the line came from: ``rank0``, ``node1/rank3``, ``algo-2/rank3``; for a line from outside the
    program, who printed it (``node1/torchrun``, ``slurm``, ``algo-2``)."""
    text: str
    time: float | None = None
    primary: bool = True
    """Global rank 0's line: what a person watching the run sees by default."""
    rank: int | None = None
    """The global rank of the program process that printed it; None for a line from outside the program (the
    launcher, the platform's toolkit, the runtime) or one whose process cannot be known."""

    @property
    def program(self) -> bool:
        """Printed by the job's program (a rank is known), not by what runs it."""
        return self.rank is not None


@dataclass(frozen=True)
class Check:
    """One preflight check: ``ok`` is True (passed), False (failed) or None (could not be checked)."""

    name: str
    ok: bool | None
    detail: str = ""
    fix: str = ""
    """What to do when it failed."""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail, "fix": self.fix}


class PreflightFailed(UserError):
    """Preflight checks failed: the job was not launched."""

    def __init__(self, checks: list[Check]) -> None:
        self.checks = checks
        lines = [f"{c.name}: {c.detail}" + (f"\n    fix: {c.fix}" if c.fix else "") for c in checks]
        super().__init__("preflight checks failed; fix them or pass --skip-checks:\n  " + "\n  ".join(lines))


@dataclass(frozen=True)
class MissingSetting:
    """A setting the backend needs that neither the spec nor the environment gives."""

    field: str
    """Where it goes in the spec, ``sagemaker.role``."""
    what: str
    """What it is, for a person who has not met it yet."""
    example: str
    """A value of the right form, ready to edit."""
    env: str | None = None
    """The environment variable that can give it instead."""
    needed_to_render: bool = True
    """False: only ``submit`` needs it (the workspace to send to); ``validate -b`` still reports it."""
    stand_in: str | None = None
    """A placeholder ``plan`` may use to rank sizes without it (the plan then says so); None: plans need it."""

    def line(self) -> str:
        also = f", or {self.env} in the environment" if self.env else ""
        return f"{self.field}: {self.what} (e.g. {self.example}{also})"


class SettingsMissing(UserError):
    """A backend's settings the spec lacks, all of them in one message, with a snippet to paste."""

    def __init__(self, backend: str, missing: list[MissingSetting]) -> None:
        self.problems = [m.line() for m in missing]
        count = f"{len(missing)} setting{'s' if len(missing) != 1 else ''}"
        snippet: dict[str, list[str]] = {}
        for m in missing:
            section, _, key = m.field.partition(".")
            snippet.setdefault(section, []).append(f"    {key}: {m.example}")
        paste = "\n".join(f"  {section}:\n" + "\n".join(keys) for section, keys in snippet.items())
        super().__init__(
            f"the {backend} backend needs {count} the spec does not give:\n  - " + "\n  - ".join(self.problems),
            hint=f"add them to the job spec (or give them with -o), for example:\n{paste}",
        )


@dataclass(frozen=True)
class Launched:
    """What a backend's launch hook reports: the run id and what the registry keeps to find it again."""

    run_id: str
    info: dict[str, Any] = field(default_factory=dict)


class Progress(Protocol):
    """What long work reports to; the CLI draws it, the API may pass nothing."""

    def planned(self, plan: Plan) -> None:
        """The plan is rendered (its decisions and warnings are worth showing before anything is sent)."""

    def step(self, description: str) -> None: ...

    def advance(self, description: str, done: int, total: int | None) -> None: ...


OptionsT = TypeVar("OptionsT", bound=BaseModel)


class Backend(abc.ABC, Generic[OptionsT]):
    name: ClassVar[str]
    description: ClassVar[str]
    options_model: ClassVar[type[BaseModel]]
    """The pydantic model of this backend's section of the job spec (``<name>:``)."""
    cloud: ClassVar[str | None] = None
    """The cloud whose sizes the catalog offers for this backend, or None (no size choice)."""
    capabilities: ClassVar[Capabilities] = Capabilities()
    sigterm_grace: ClassVar[int] = 30
    """Seconds between SIGTERM (cancel, preemption) and SIGKILL on this backend (the runtime contract)."""
    needs_credentials: ClassVar[bool] = False
    spend_while_running: ClassVar[bool] = False
    """``_bill`` reports a priced spend while a run is going, so ``resources.max_cost`` can be enforced."""
    no_bill_reason: ClassVar[str] = "this backend reports no figures about what a run cost (it has no _bill hook)"
    """What ``cost`` says when ``_bill`` returns None."""
    no_budget_reason: ClassVar[str] = "it cannot report what a run spends while it is going"
    """Why ``resources.max_cost`` is not enforced here, when ``spend_while_running`` is False."""
    watches_stalls: ClassVar[bool] = False
    """Enforces ``limits.stall_timeout`` (the local supervisor does); elsewhere a spec that sets it gets a warning."""
    registry: RunRecords

    def __init__(self, *, registry: RunRecords | None = None) -> None:
        self.registry = registry if registry is not None else MemoryRecords()

    # -- what a backend implements -------------------------------------------------------------
    @abc.abstractmethod
    def _render(self, spec: JobSpec) -> Plan: ...

    @abc.abstractmethod
    def _launch(self, plan: Plan, *, provision: bool, progress: Progress | None) -> Launched: ...

    @abc.abstractmethod
    def _describe(self, run_id: str) -> RunStatus | None:
        """The run's status, or None when the backend has no such run."""

    @abc.abstractmethod
    def _log_iter(self, run_id: str, *, follow: bool) -> Iterator[LogLine]: ...

    @abc.abstractmethod
    def _cancel(self, run_id: str) -> None:
        """Ask the run to stop (SIGTERM first, so the script can checkpoint); called only for a live run."""

    def _metric_iter(self, run_id: str, *, follow: bool) -> Iterator[MetricRecord]:
        """Metric records parsed from the run's log lines (the same on every backend): global rank 0's, or every
        rank's with ``metrics.ranks: all``."""
        return metrics_from_lines(
            self._log_iter(run_id, follow=follow), self.metric_patterns(run_id), self.metric_ranks(run_id)
        )

    def metric_patterns(self, run_id: str) -> list[Pattern]:
        """The metrics run ``run_id`` declared by regular expression (kept in this machine's registry)."""
        record = self.registry.get(run_id)
        return patterns_from(record.info.get("metrics", [])) if record else []

    def metric_ranks(self, run_id: str) -> str:
        """Whose lines run ``run_id`` reads metrics from: ``"0"`` (global rank 0's) or ``"all"``."""
        record = self.registry.get(run_id)
        return str(record.info.get("metric_ranks", RANK_ZERO)) if record else RANK_ZERO

    def _preflight(self, plan: Plan) -> list[Check]:
        return []

    def _bill(self, run_id: str) -> Bill | None:
        """What run ``run_id`` cost so far, from this backend's own figures; None when it cannot say."""
        return None

    def _translate(self, error: Exception) -> CloudDDPError | None:
        """This backend's SDK error as cloudddp's (e.g. a missing credential as a BackendUnavailable), or None."""
        return None

    def for_attempt(self, plan: Plan, attempt: int) -> Plan:
        """``plan`` for a recovery's ``attempt`` (2, 3, ...): what must differ between attempts (a cloud's job
        name, which must be unique), with the attempt in its tags; the same code, data and checkpoints.
        A backend whose run ids are fresh at every launch needs nothing (the default)."""
        return plan

    def _resume_notes(self, spec: JobSpec) -> list[str]:
        """For a script other than the shared one (which checkpoints by itself), what makes a resubmit resume:
        its own saves, only where they outlive the run."""
        files = spec.checkpoint.files
        if files:
            return [
                f"checkpoint.files ({', '.join(files)}): before the program starts, on every node, each resolves into "
                "the checkpoint folder ($CLOUDDDP_CHECKPOINT_DIR/files, a link; a pattern's files are linked when "
                "kept and saved when new), so your script's own save and load resume on a resubmit"
            ]
        if not spec.checkpoint.enabled or is_shared_script(spec):
            return []
        return [
            "your script: a resubmit resumes only if your script writes to $CLOUDDDP_CHECKPOINT_DIR or declares "
            "checkpoint.files; what it writes in its working folder is discarded with the run"
        ]

    def _recovery_notes(self, spec: JobSpec) -> tuple[list[str], list[str]]:
        """What the plan says about ``limits.recover_to: next_size`` (decisions, warnings): here, that it has no
        effect; a backend that chooses sizes names where a recovery would move (:class:`~.sized.SizedBackend`)."""
        if spec.limits.recover_to != "next_size":
            return [], []
        return [], [f"limits.recover_to: next_size has no effect on the {self.name} backend: it chooses no size"]

    def size_target(self, spec: JobSpec) -> SizeTarget | None:
        """Where this backend's sizes come from for ``spec`` (None: the backend chooses no size)."""
        return None

    def missing_settings(self, spec: JobSpec) -> list[MissingSetting]:
        """Every setting this backend needs for ``spec`` that the spec and the environment leave out (offline:
        nothing is looked up). Those with ``needed_to_render`` stop a render; ``validate -b`` reports them all."""
        return []

    def options(self, spec: JobSpec) -> OptionsT:
        """This backend's section of ``spec``."""
        section: OptionsT = spec.section(self.name)
        return section

    # -- the verbs -------------------------------------------------------------------------------
    def render(self, spec: JobSpec) -> Plan:
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
        with self._errors():
            plan = self._render(spec)
        plan.warnings += [f"{f.value}: {why}" for f, why in self.capabilities.caveats.items() if f in used]
        plan.decisions += self._resume_notes(spec)
        plan.metrics = [m.model_dump() for m in spec.metrics.declared]
        plan.metric_ranks = spec.metrics.ranks
        plan.step_key = job_key(spec)
        decisions, warnings = self._recovery_notes(spec)
        plan.decisions += decisions
        plan.warnings += warnings
        plan.max_cost = spec.resources.max_cost
        plan.warnings += self._budget_warnings(plan)
        if spec.limits.stall_timeout not in (None, "off") and not self.watches_stalls:
            plan.warnings.append(
                f"limits.stall_timeout is not enforced on {self.name} (only the local supervisor watches for "
                "stalls): a stuck rank fails the job after distribution.collective_timeout if the script passes "
                "it to init_process_group, else at limits.max_runtime"
            )
        return plan

    def _budget_warnings(self, plan: Plan) -> list[str]:
        """The estimate against ``resources.max_cost``, and whether this backend can hold a run to it."""
        if plan.max_cost is None:
            return []
        out = []
        total = (plan.estimate or {}).get("total_cost")
        if isinstance(total, (int, float)) and total > plan.max_cost:
            out.append(
                f"resources.max_cost: the estimated cost ${total:,.2f} is over the budget of ${plan.max_cost:,.2f}"
            )
        elif not isinstance(total, (int, float)):
            out.append(
                f"resources.max_cost: there is no cost estimate to check the budget of ${plan.max_cost:,.2f} against"
            )
        if not self.spend_while_running:
            out.append(f"resources.max_cost is not enforced by the {self.name} backend: {self.no_budget_reason}")
        return out

    def launch(
        self, plan: Plan, *, checks: bool = True, provision: bool = True, progress: Progress | None = None
    ) -> str:
        if plan.backend != self.name:
            raise UserError(f"this plan was rendered for the {plan.backend} backend, not {self.name}")
        self.check_launch_options(provision)
        plan.secret_values()  # a variable env.X.from_env names but the shell lacks, a short secret: before any change
        if checks:
            failed = [c for c in self.preflight(plan) if c.ok is False]
            if failed:
                raise PreflightFailed(failed)
        with self._errors():
            launched = self._launch(plan, provision=provision, progress=progress)
        if self.registry.get(launched.run_id) is None:
            info = {
                **launched.info,
                **({"metrics": plan.metrics} if plan.metrics else {}),
                **({"metric_ranks": plan.metric_ranks} if plan.metric_ranks != RANK_ZERO else {}),
                "estimate": plan.estimate,
                "step_key": plan.step_key,
                **({"max_cost": plan.max_cost} if plan.max_cost is not None else {}),
            }
            self.registry.add(launched.run_id, self.name, plan.job_name, RunState.PENDING.value, info)
        return launched.run_id

    def preflight(self, plan: Plan) -> list[Check]:
        with self._errors():
            return self._preflight(plan)

    def status(self, run_id: str) -> RunStatus:
        with self._errors():
            found = self._describe(run_id)
        if found is None:
            raise RunNotFound(
                f"no {self.name} run {run_id!r}", hint="`cloudddp list` shows the runs started from this machine"
            )
        return found

    def logs(self, run_id: str, *, follow: bool = False) -> Iterator[LogLine]:
        self._require(Feature.FOLLOW_LOGS if follow else None)
        self.status(run_id)  # an unknown id fails here, before the first line
        return self._mapped(lambda: self._log_iter(run_id, follow=follow))

    def metrics(self, run_id: str, *, follow: bool = False) -> Iterator[MetricRecord]:
        self._require(Feature.FOLLOW_LOGS if follow else None)
        self.status(run_id)
        return self._mapped(lambda: self._metric_iter(run_id, follow=follow))

    def cancel(self, run_id: str) -> bool:
        self._require(Feature.CANCEL)
        state = self.status(run_id).state
        if state.terminal:
            return False
        if state is RunState.STOPPING:
            return True  # a stop is under way: asked again, it is not sent again (a cloud refuses a second one)
        with self._errors():
            self._cancel(run_id)
        return True

    def adopt(self, run_id: str) -> bool:
        """Start supervising ``run_id`` again when the process of this machine that supervised it is gone while the
        run is not recorded as ended (its training may still be going); True when a new supervisor was started.
        Not free of side effects, unlike ``status``: the runner calls it before it reads a status (and a backend's
        own followers of logs and metrics may, while they wait). Backends whose runs the platform supervises have
        nothing to adopt."""
        return False

    def bill(self, run_id: str) -> Bill | None:
        self.status(run_id)  # an unknown id fails here
        with self._errors():
            return self._bill(run_id)

    # -- shared machinery -----------------------------------------------------------------------
    def check_launch_options(self, provision: bool) -> None:
        """A UserError for ``provision=False`` on a backend that cannot leave its clusters alone."""
        if not provision and not self.capabilities.supports(Feature.PROVISION):
            raise UserError(
                f"--no-provision: {self.capabilities.unsupported[Feature.PROVISION]}",
                hint="drop --no-provision for this backend",
            )

    def _require(self, feature: Feature | None) -> None:
        if feature is not None and not self.capabilities.supports(feature):
            raise UserError(f"{self.name} cannot {feature.value}: {self.capabilities.unsupported[feature]}")

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Run a hook with this backend's SDK errors mapped to cloudddp's."""
        try:
            yield
        except CloudDDPError:
            raise
        except Exception as e:
            mapped = self._translate(e)
            if mapped is None:
                raise
            raise mapped from None

    def _mapped(self, make: Callable[[], Iterator[Any]]) -> Iterator[Any]:
        """A generator hook with errors mapped, including those raised while it is iterated."""
        with self._errors():
            yield from make()
