"""The backend protocol: render → launch → status / logs / metrics / cancel / list.

A backend is a small class. ``render`` is pure (no network, no credentials, no cloud SDK import);
``launch`` sends exactly the plan ``render`` produced. What a backend cannot do it declares in
``capabilities.unsupported`` with a reason that reaches the user.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Protocol

from ..metrics import MetricRecord, metrics_from_lines
from ..plan import Plan
from ..registry import Registry
from ..spec import JobSpec


class RunState(str, Enum):
    PENDING = "pending"      # accepted, waiting for capacity or a queue
    STARTING = "starting"    # provisioning, pulling images, rendezvous
    RUNNING = "running"
    STOPPING = "stopping"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"

    @property
    def terminal(self) -> bool:
        return self in (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED)


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

    def _repr_html_(self) -> str:
        import html

        colour = {"succeeded": "#15803d", "failed": "#b91c1c", "cancelled": "#a16207"}.get(self.state.value, "#1d4ed8")
        return (f"<span style='background:{colour};color:white;padding:1px 6px;border-radius:4px'>{self.state.value}</span> "
                f"<code>{html.escape(self.run_id)}</code> ({html.escape(self.backend)}) {html.escape(self.message)}")

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
            "details": self.details,
        }


@dataclass(frozen=True)
class LogLine:
    source: str
    """Where the line came from: ``rank0``, ``node1/rank3``, ``algo-2``, ``process_0``."""
    text: str
    time: float | None = None


@dataclass(frozen=True)
class Capabilities:
    cancel: bool = True
    follow_logs: bool = True
    metrics: bool = True
    multi_node: bool = True
    spot: bool = False
    provision: bool = False
    unsupported: dict[str, str] = field(default_factory=dict)
    """Feature → why this backend does not support it."""


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


class Progress(Protocol):
    """What long work reports to; the CLI draws it with rich, the API may ignore it."""

    def step(self, description: str) -> None: ...

    def advance(self, description: str, done: int, total: int | None) -> None: ...


class Backend(abc.ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    capabilities: ClassVar[Capabilities] = Capabilities()
    registry: Registry

    @abc.abstractmethod
    def render(self, spec: JobSpec) -> Plan:
        """The exact request this backend would send for ``spec``; pure and offline."""

    @abc.abstractmethod
    def launch(self, plan: Plan, *, progress: Progress | None = None) -> str:
        """Send ``plan``; return the run id."""

    @abc.abstractmethod
    def status(self, run_id: str) -> RunStatus: ...

    @abc.abstractmethod
    def logs(self, run_id: str, *, follow: bool = False) -> Iterator[LogLine]: ...

    def metrics(self, run_id: str, *, follow: bool = False) -> Iterator[MetricRecord]:
        """Metric records parsed from the run's log lines (the same on every backend)."""
        return metrics_from_lines(self.logs(run_id, follow=follow))

    def preflight(self, plan: Plan) -> list[Check]:
        """Checks that need the target (credentials, quota, data reachable); run by ``doctor`` and before submit."""
        return []

    @abc.abstractmethod
    def cancel(self, run_id: str) -> None: ...

    def list(self) -> list[RunStatus]:
        """This backend's runs from this machine's registry, each with its current status."""
        from ..errors import RunNotFound

        out = []
        for record in self.registry.list(backend=self.name):
            try:
                out.append(self.status(record.run_id))
            except RunNotFound:
                continue
        return out

    def submit(self, spec: JobSpec, *, progress: Progress | None = None) -> tuple[Plan, str]:
        """render + launch: what is sent is what a dry run shows."""
        plan = self.render(spec)
        return plan, self.launch(plan, progress=progress)
