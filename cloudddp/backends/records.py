"""Where a backend keeps what it must remember about its runs: the run records (this machine's run database, or
memory)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol


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
