"""Where a backend keeps what it must remember about its runs: the run records (this machine's run database, or
memory)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from cloudddp.observe.metrics import RANK_ZERO
from cloudddp.plan import JsonDataclass, Plan


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


@dataclass(frozen=True, kw_only=True)
class LaunchInfo(JsonDataclass):
    """What a run's record keeps of its plan from the launch on (:meth:`~cloudddp.backends.base.Backend.launch`
    writes it): how its metrics are read, its estimate, which measured step times it teaches, where it went and
    its budget. Beside these keys the info holds the backend's own (what its launch hook reported) and the runner's;
    each owner reads its own typed view of the same info with :meth:`~cloudddp.plan.JsonDataclass.from_fields`."""

    metrics: tuple[dict[str, str], ...] = ()
    """The metrics the job declares by regular expression (``{"name", "regex"}``)."""
    metric_ranks: str = RANK_ZERO
    estimate: dict[str, Any] | None = None
    """The plan's :class:`~cloudddp.plan.Estimate`, as data."""
    step_key: str = ""
    target: dict[str, Any] = field(default_factory=dict)
    """The plan's :class:`~cloudddp.plan.Target`, as data (``Backend.target_of`` reads it back typed)."""
    max_cost: float | None = None

    @classmethod
    def of(cls, plan: Plan[Any, Any]) -> LaunchInfo:
        return cls(
            metrics=tuple(plan.metrics),
            metric_ranks=plan.metric_ranks,
            estimate=plan.estimate.to_dict() if plan.estimate else None,
            step_key=plan.step_key,
            target=plan.target.to_dict(),
            max_cost=plan.max_cost,
        )


class RunRecords(Protocol):
    """Where a backend keeps its runs' records (the runner gives it :class:`cloudddp.runs.database.RunDatabase`)."""

    def get(self, run_id: str) -> RunRecord | None: ...

    def add(self, run_id: str, backend: str, name: str, state: str, info: dict[str, Any] | None = None) -> None: ...

    def update(self, run_id: str, *, state: str | None = None, info: dict[str, Any] | None = None) -> None: ...


class MemoryRecords:
    """Run records kept in memory: a backend constructed without run records (a plugin's test, a render)."""

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
