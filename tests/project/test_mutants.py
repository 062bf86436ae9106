"""The curated mutants of ``make mutants`` stay runnable: each one's text is in its file once, its row is one row
of docs/guarantees.md, and every test it names exists; every row has one; docs/proof.md lists them as the list has them
(the run itself is ``make mutants``, not part of make test)."""

from __future__ import annotations

from pathlib import Path

from tests.project.test_proof import _test_names
from tests.support import proof_page
from tests.support.cli import ROOT
from tests.support.mutant_list import MUTANTS
from tests.support.mutants import Mutant, Outcome, copy_project, run_one

PAGE = ROOT / "docs" / "guarantees.md"


def _rows() -> list[str]:
    return [line for line in PAGE.read_text().splitlines() if line.startswith("| ")]


def test_each_mutant_changes_its_file_once_names_one_row_and_tests_that_exist() -> None:
    assert len({m.id for m in MUTANTS}) == len(MUTANTS)
    problems = []
    for m in MUTANTS:
        count = (ROOT / m.path).read_text().count(m.old)
        if count != 1 or m.old == m.new:
            problems.append(f"{m.id}: its text is in {m.path} {count} times")
        rows = [row for row in _rows() if row.startswith(f"| {m.row}")]
        if len(rows) != 1:
            problems.append(f"{m.id}: {len(rows)} rows start with {m.row!r}")
        for test in m.tests:
            path, _, name = test.partition("::")
            if not (ROOT / path).is_file() or (name and name not in _test_names(ROOT / path)):
                problems.append(f"{m.id}: no test {test}")
    assert problems == []


def test_every_row_of_the_guarantees_has_a_mutant() -> None:
    table = PAGE.read_text().split("\n## The guarantees\n", 1)[1].split("\n## ", 1)[0]
    rows = [row for row in table.splitlines() if row.startswith("| ") and not row.startswith("| guarantee |")]
    assert [row[:100] for row in rows if not any(row.startswith(f"| {m.row}") for m in MUTANTS)] == []


def test_the_proof_page_lists_every_mutant_as_the_list_has_it() -> None:
    """docs/proof.md is what ``python -m tests.support.proof_page`` writes: every mutant, its row, file and tests."""
    text = proof_page.PAGE.read_text()
    assert text == proof_page.render(MUTANTS, proof_page.recorded(text))


def test_the_driver_records_each_run_on_the_page_and_keeps_the_others(tmp_path: Path) -> None:
    page = tmp_path / "proof.md"
    first, second = MUTANTS[0], MUTANTS[1]
    page.write_text(proof_page.render(MUTANTS, {second.id: "killed, 7 s"}))
    proof_page.record([Outcome(first, "survived", 12.4, "")], page)
    runs = proof_page.recorded(page.read_text())
    assert (runs[first.id], runs[second.id]) == ("survived, 12 s", "killed, 7 s")
    assert runs[MUTANTS[2].id] == proof_page.NOT_RUN


def test_a_mutant_is_applied_to_a_copy_and_the_working_tree_is_left_alone(tmp_path: Path) -> None:
    """The driver on a mutant its test kills (and on one it does not): the verdicts, and the file untouched here
    and put back in the copy."""
    copy = copy_project(tmp_path / "copy")
    target = "cloudddp/code/snapshot.py"
    before = (ROOT / target).read_text()
    test = ("tests/code/test_snapshot.py::test_archive_member_names_never_climb_out",)
    killed = run_one(Mutant("t", "", target, 'or ".." in parts ', "", test), copy)
    survived = run_one(Mutant("t", "", target, "paths must stay inside", "paths should stay inside", test), copy)
    assert (killed.verdict, survived.verdict) == ("killed", "survived"), (killed, survived)
    assert (ROOT / target).read_text() == before == (copy / target).read_text()
