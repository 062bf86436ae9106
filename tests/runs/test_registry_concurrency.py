"""Many submissions at once keep the run registry consistent (SQLite in WAL mode, busy timeouts)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from cloudddp.api import Job
from cloudddp.backends.status import RunState
from cloudddp.runs.database import RunDatabase, _use_wal

pytestmark = pytest.mark.slow


def test_twelve_parallel_submissions_are_all_registered_once(tmp_path: Path) -> None:
    job = Job.from_dict(
        {
            "name": "parallel",
            "code": {
                "dir": str(tmp_path),
                "command": [sys.executable, "-c", "import os; print('rank', os.environ['RANK'])"],
            },
            "local": {"processes_per_node": 1},
            "checkpoint": {"enabled": False},
        }
    )
    with ThreadPoolExecutor(max_workers=12) as pool:
        runs = list(pool.map(lambda _: job.submit("local"), range(12)))
    ids = [run.run_id for run in runs]
    assert len(set(ids)) == 12
    states = [run.wait(timeout=240, poll=0.5).state for run in runs]
    assert states == [RunState.SUCCEEDED] * 12
    registered = [r for r in RunDatabase().list(limit=1000) if r.name == "parallel"]
    assert sorted(r.run_id for r in registered) == sorted(ids)
    assert {r.state for r in registered} == {"succeeded"}


def test_registry_writes_from_many_processes_are_not_lost(tmp_path) -> None:
    import multiprocessing as mp

    db = tmp_path / "runs.db"
    RunDatabase(db)
    with mp.get_context("spawn").Pool(8) as pool:
        pool.starmap(_add_and_update, [(str(db), i) for i in range(40)])
    records = RunDatabase(db).list(limit=1000)
    assert len(records) == 40
    assert all(r.state == "succeeded" and r.info == {"n": int(r.run_id[4:]), "done": True} for r in records)


def test_a_new_registry_opened_by_many_processes_at_once_loses_no_writer(tmp_path: Path) -> None:
    """The first connections to a new file put it in WAL mode, a change SQLite gives no busy wait: two first
    submits at once made one fail with "database is locked" (1 process in 120 here before the fix)."""
    add = "import sys; from pathlib import Path; from cloudddp.runs.database import RunDatabase; "
    add += "RunDatabase(Path(sys.argv[1])).add(sys.argv[2], 'local', 'p', 'queued')"
    for trial in range(12):
        db = tmp_path / f"{trial}" / "runs.db"
        writers = [
            subprocess.Popen([sys.executable, "-c", add, str(db), f"run-{i}"], stderr=subprocess.PIPE, text=True)
            for i in range(6)
        ]
        ended = [(p.wait(timeout=120), p.communicate()[1]) for p in writers]
        assert [err[-500:] for code, err in ended if code != 0] == []
        assert len(RunDatabase(db).list(limit=10)) == 6


def _add_and_update(db: str, i: int) -> None:
    reg = RunDatabase(Path(db))
    reg.add(f"run-{i}", "local", "p", "starting", {"n": i})
    reg.update(f"run-{i}", state="running")
    reg.update(f"run-{i}", state="succeeded", info={"done": True})


def test_parallel_packs_of_one_folder_share_one_snapshot(tmp_path: Path, cloudddp_home: Path) -> None:
    import multiprocessing as mp
    import os

    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('train')\n")
    (code / "weights.bin").write_bytes(os.urandom(3_000_000))
    with mp.get_context("spawn").Pool(6) as pool:
        digests = pool.map(_pack, [str(code)] * 6)
    assert len(set(digests)) == 1
    left = sorted(p.name for p in (cloudddp_home / "snapshots").iterdir() if p.is_file())
    assert left == [f"{digests[0]}.tar.gz"]  # one archive, no half-written temporary left behind
    with tarfile.open(cloudddp_home / "snapshots" / left[0]) as tar:
        assert sorted(tar.getnames()) == ["train.py", "weights.bin"]


def _pack(code: str) -> str:
    from cloudddp.code.snapshot import pack

    return pack(Path(code)).sha256


class _LockedAtFirst:
    """A connection whose first ``locked`` WAL switches are refused as SQLite refuses one that meets another
    connection's switch (no busy wait); then the real connection answers."""

    def __init__(self, db: Any, refusals: int, error: str = "database is locked") -> None:
        self.db, self.refusals, self.error, self.switches = db, refusals, error, 0

    def execute(self, sql: str) -> Any:
        if sql == "PRAGMA journal_mode=WAL":
            self.switches += 1
            if self.switches <= self.refusals:
                raise sqlite3.OperationalError(self.error)
        return self.db.execute(sql)


@pytest.mark.parametrize("refusals", [1, 3])
def test_a_wal_switch_refused_as_locked_is_asked_again_and_another_error_is_not(tmp_path: Path, refusals: int) -> None:
    """The race of the test above, made certain: the switch is refused ``refusals`` times, then made."""
    db = _LockedAtFirst(sqlite3.connect(tmp_path / "runs.db", isolation_level=None), refusals)
    _use_wal(db)  # type: ignore[arg-type]
    assert db.switches == refusals + 1
    assert db.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    other = _LockedAtFirst(sqlite3.connect(tmp_path / "other.db", isolation_level=None), 1, "disk I/O error")
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        _use_wal(other)  # type: ignore[arg-type]
    assert other.switches == 1
