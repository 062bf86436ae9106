"""The run registry: every run submitted from this machine, for ``status``, ``logs`` and ``list`` later.

SQLite (stdlib) in WAL mode with a busy timeout, so many processes (parallel submits, the local
supervisor, a notebook) can read and write at once. It stores no secret: only ids, names, states and
paths. The home folder is ``$CLOUDDDP_HOME`` or ``~/.cloudddp``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id     TEXT PRIMARY KEY,
    backend    TEXT NOT NULL,
    name       TEXT NOT NULL,
    state      TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    info       TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS runs_created ON runs (created_at);
"""


def home() -> Path:
    path = Path(os.environ.get("CLOUDDDP_HOME") or Path.home() / ".cloudddp")
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class RunRecord:
    run_id: str
    backend: str
    name: str
    state: str
    created_at: float
    updated_at: float
    info: dict[str, Any] = field(default_factory=dict)


class Registry:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or home() / "runs.db"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.executescript(_SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA busy_timeout=30000")
            yield db
        finally:
            db.close()

    def add(self, run_id: str, backend: str, name: str, state: str, info: dict[str, Any] | None = None) -> None:
        now = time.time()
        with self._connect() as db:
            db.execute(
                "INSERT INTO runs (run_id, backend, name, state, created_at, updated_at, info) VALUES (?,?,?,?,?,?,?)",
                (run_id, backend, name, state, now, now, json.dumps(info or {})),
            )

    def update(self, run_id: str, *, state: str | None = None, info: dict[str, Any] | None = None) -> None:
        """Set the state and merge ``info`` into the stored info, atomically."""
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute("SELECT state, info FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                db.execute("ROLLBACK")
                return
            merged = {**json.loads(row[1]), **(info or {})}
            db.execute(
                "UPDATE runs SET state = ?, info = ?, updated_at = ? WHERE run_id = ?",
                (state or row[0], json.dumps(merged), time.time(), run_id),
            )
            db.execute("COMMIT")

    def get(self, run_id: str) -> RunRecord | None:
        with self._connect() as db:
            row = db.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return _record(row) if row else None

    def find(self, prefix: str) -> list[RunRecord]:
        """Runs whose id starts with ``prefix`` (so a unique prefix is enough on the CLI)."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT * FROM runs WHERE substr(run_id, 1, ?) = ? ORDER BY created_at DESC",
                (len(prefix), prefix),
            ).fetchall()
        return [_record(r) for r in rows]

    def list(self, backend: str | None = None, limit: int = 100) -> list[RunRecord]:
        query, args = "SELECT * FROM runs", []
        if backend:
            query, args = query + " WHERE backend = ?", [backend]
        with self._connect() as db:
            rows = db.execute(query + " ORDER BY created_at DESC LIMIT ?", (*args, limit)).fetchall()
        return [_record(r) for r in rows]


def _record(row: tuple[Any, ...]) -> RunRecord:
    return RunRecord(row[0], row[1], row[2], row[3], row[4], row[5], json.loads(row[6]))
