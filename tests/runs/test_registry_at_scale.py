"""The run registry at scale: every query answered from an index, pages that add up, filters that filter."""

from __future__ import annotations

import json
import shlex
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from cloudddp.runs.database import RunDatabase
from tests.support.cli import cli
from tests.support.runs import STATES, fill


@pytest.fixture
def registry(tmp_path: Path) -> RunDatabase:
    reg = RunDatabase(tmp_path / "runs.db")
    fill(reg, 10_000)
    return reg


@contextmanager
def statements(registry: RunDatabase, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every SQL statement the registry runs, with its values bound."""
    seen: list[str] = []
    connect = sqlite3.connect

    def traced(*args: object, **kwargs: object) -> sqlite3.Connection:
        db = connect(*args, **kwargs)  # type: ignore[arg-type]
        db.set_trace_callback(seen.append)
        return db

    monkeypatch.setattr(sqlite3, "connect", traced)
    yield seen
    monkeypatch.undo()


def test_every_query_of_list_find_and_count_is_answered_from_an_index(
    registry: RunDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    newest = registry.list(limit=1)[0]
    with statements(registry, monkeypatch) as seen:
        registry.list()
        registry.list(limit=20, before=newest)
        registry.list(state="failed", limit=20)
        registry.list(backend="sagemaker", state="failed", limit=20, before=newest)
        registry.list(name="job07", limit=20)
        registry.list(name="job1*", limit=20)
        registry.find("job03-0099")
        registry.get(newest.run_id)
        registry.count(state="running")
    queries = [q for q in seen if q.lstrip().upper().startswith("SELECT")]
    assert len(queries) == 9, queries
    with sqlite3.connect(registry.path) as db:
        for query in queries:
            plan = [row[-1] for row in db.execute("EXPLAIN QUERY PLAN " + query)]
            full_scans = [step for step in plan if step.startswith("SCAN") and "INDEX" not in step]
            assert not full_scans, (query, plan)


def test_pages_filters_and_prefixes_agree_with_the_whole_table(registry: RunDatabase) -> None:
    everything = registry.list(limit=None)
    assert len(everything) == 10_000 == registry.count()
    assert [r.created_at for r in everything] == sorted((r.created_at for r in everything), reverse=True)
    pages, after = [], None
    while page := registry.list(limit=999, before=after):
        pages += page
        after = page[-1]
    assert [r.run_id for r in pages] == [r.run_id for r in everything]

    failed_sm = registry.list(backend="sagemaker", state="failed", limit=None)
    assert failed_sm == [r for r in everything if r.backend == "sagemaker" and r.state == "failed"]
    assert len(failed_sm) == registry.count(backend="sagemaker", state="failed") > 0
    assert registry.list(name="job1*", limit=None) == [r for r in everything if r.name.startswith("job1")]
    assert registry.list(name="job1", limit=None) == []  # no wildcard: the exact name
    assert [r.run_id for r in registry.find("job03-00")] == [
        r.run_id for r in everything if r.run_id.startswith("job03-00")
    ]
    assert registry.find("") == everything and registry.find("nope") == []


def test_cli_list_pages_with_filters_and_says_how_to_get_the_next_page(cloudddp_home: Path) -> None:
    fill(RunDatabase(), 300)
    first = cli("list", "--state", "failed", "--name", "job0*", "-n", "5")
    assert first.returncode == 0, first.stderr
    shown = [line.split()[1] for line in first.stdout.splitlines() if "job0" in line]
    assert len(shown) == 5 and all(run.startswith("job0") for run in shown)
    hint = shlex.split(first.stderr.split("the next page: ", 1)[1])
    matching = sum(1 for i in range(300) if STATES[i % 4] == "failed" and i % 40 < 10)
    assert f"5 shown of {matching} matching runs" in " ".join(first.stderr.split())
    assert hint[:2] == ["cloudddp", "list"] and hint[-2:] == ["--before", shown[-1]]
    second = cli(*hint[1:], "--json")
    assert second.returncode == 0, second.stderr
    runs = json.loads(second.stdout)
    assert (
        len(runs) == 5
        and {r["state"] for r in runs} == {"failed"}
        and runs[0]["created_at"] < 1e9 + int(shown[-1][-6:])
    )
    assert cli("list", "--before", "no-such-run").returncode == 2
