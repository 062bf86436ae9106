"""The run database: every run submitted from this machine, for ``status``, ``logs`` and ``list`` later.

SQLite (stdlib) in WAL mode with a busy timeout, so many processes (parallel submits, the local
supervisor, a notebook) can read and write at once. It stores no secret: only ids, names, states and
paths. The home folder is ``$CLOUDDDP_HOME`` or ``~/.cloudddp``.

Every query a command makes is answered from an index (newest first, per state, backend or name;
run ids by prefix), and ``list`` pages by position (``before`` a run) rather than by offset, so
``list`` and ``status`` cost the same with ten runs or a hundred thousand.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cloudddp.backends.records import RunRecord
from cloudddp.paths import home

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
DROP INDEX IF EXISTS runs_created;
CREATE INDEX IF NOT EXISTS runs_newest ON runs (created_at, run_id);
CREATE INDEX IF NOT EXISTS runs_state ON runs (state, created_at, run_id);
CREATE INDEX IF NOT EXISTS runs_backend ON runs (backend, created_at, run_id);
CREATE INDEX IF NOT EXISTS runs_name ON runs (name, created_at, run_id);
"""
_WILDCARDS = frozenset("*?[")
BUSY_TIMEOUT_S = 30.0


def _use_wal(db: sqlite3.Connection) -> None:
    """Put the file in WAL mode, which lasts in the file once set.

    Only the first connections to a new file set it, and SQLite gives a journal-mode change no busy wait: a process
    doing it while another holds the file is told "database is locked" at once (two parallel first submits did).
    So the mode is read first, and a change refused as locked is asked again until the busy timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


class RunDatabase:
    """This machine's runs (:class:`~cloudddp.backends.base.RunRecords` for the backends the runner opens)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or home() / "runs.db"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.executescript(_SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            _use_wal(db)
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

    def named(self, part: str, backend: str | None = None) -> list[RunRecord]:
        """The runs ``part`` names (on ``backend``, when given): the run whose id it is, else every run :meth:`find`
        matches, newest first. One run is an answer; several, an id to give more of; none, a run not known here."""
        found = self.find(part)
        found = [r for r in found if r.run_id == part] or found
        return [r for r in found if backend is None or r.backend == backend]

    def find(self, part: str) -> list[RunRecord]:
        """Runs whose id starts with ``part``, newest first; when none does, those whose id ends with it (the
        random tail of an id is the easiest part to type: ``cloudddp status 6c6a``)."""
        return self._starting(part) or self._ending(part)

    def _ending(self, suffix: str) -> list[RunRecord]:
        if not suffix:
            return []
        escaped = suffix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        with self._connect() as db:
            rows = db.execute(
                "SELECT * FROM runs WHERE run_id LIKE ? ESCAPE '\\' ORDER BY created_at DESC", ["%" + escaped]
            ).fetchall()
        return [_record(r) for r in rows if r[0].endswith(suffix)]  # LIKE ignores ASCII case

    def latest(self) -> RunRecord | None:
        """The newest run submitted from this machine."""
        newest = self.list(limit=1)
        return newest[0] if newest else None

    def _starting(self, prefix: str) -> list[RunRecord]:
        query, args = "SELECT * FROM runs WHERE run_id >= ?", [prefix]
        if prefix and ord(prefix[-1]) < 0x10FFFF:  # ids in [prefix, prefix with its last character bumped)
            query, args = query + " AND run_id < ?", [prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)]
        with self._connect() as db:
            rows = db.execute(query + " ORDER BY created_at DESC", args).fetchall()
        return [_record(r) for r in rows if r[0].startswith(prefix)]

    def list(
        self,
        backend: str | None = None,
        limit: int | None = 100,
        *,
        state: str | None = None,
        name: str | None = None,
        before: RunRecord | None = None,
    ) -> list[RunRecord]:
        """Runs newest first, filtered by backend, state and job name (``*?[`` make it a glob); at most
        ``limit`` (None: all). ``before``: only runs older than this one (the next page after it)."""
        where, args = _filters(backend, state, name)
        if before is not None:
            where.append("(created_at, run_id) < (?, ?)")
            args += [before.created_at, before.run_id]
        query = "SELECT * FROM runs" + (" WHERE " + " AND ".join(where) if where else "")
        query += " ORDER BY created_at DESC, run_id DESC"
        if limit is not None:
            query, args = query + " LIMIT ?", [*args, limit]
        with self._connect() as db:
            rows = db.execute(query, args).fetchall()
        return [_record(r) for r in rows]

    def count(self, backend: str | None = None, *, state: str | None = None, name: str | None = None) -> int:
        """How many runs ``list`` would show with these filters and no limit."""
        where, args = _filters(backend, state, name)
        with self._connect() as db:
            row = db.execute(
                "SELECT count(*) FROM runs" + (" WHERE " + " AND ".join(where) if where else ""), args
            ).fetchone()
        return int(row[0])


def _filters(backend: str | None, state: str | None, name: str | None) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    args: list[Any] = []
    for column, value in (("backend", backend), ("state", state), ("name", name)):
        if value:
            glob = column == "name" and not _WILDCARDS.isdisjoint(value)
            where.append(f"{column} {'GLOB' if glob else '='} ?")
            args.append(value)
    return where, args


def _record(row: tuple[Any, ...]) -> RunRecord:
    return RunRecord(row[0], row[1], row[2], row[3], row[4], row[5], json.loads(row[6]))
