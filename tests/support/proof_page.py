"""docs/proof.md: every mutant of ``make mutants`` with the row of docs/guarantees.md it breaks, its file, the tests
it runs and its last run.

The page is written from :data:`tests.support.mutant_list.MUTANTS`; each mutant's last verdict and time live in the
page itself, and the driver (:mod:`tests.support.mutants`) replaces those of the mutants it ran (:func:`record`).
``python -m tests.support.proof_page`` writes the page again from the list, keeping the recorded runs (a mutant
added since shows "not run yet" until it runs); tests/project/test_mutants.py fails when the page is not what it
writes.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from pathlib import Path

from tests.support.cli import ROOT
from tests.support.mutants import Mutant, Outcome

PAGE = ROOT / "docs" / "proof.md"
NOT_RUN = "not run yet"
_LINE = re.compile(r"^\| `(?P<id>[^`]+)` \|.*\| (?P<last>[^|]+) \|$")
_SECONDS = re.compile(r"^\w+, (\d+) s$")

HEAD = """# Proof by mutation: every mutant and its last run

Each line is one deliberate bug `make mutants` plants in the code behind a row of
[the guarantees](guarantees.md#the-guarantees), and the tests that row cites, which must fail
([how it works](guarantees.md#proof-by-mutation-make-mutants)). Every row of that table has at least one.
A mutant whose tests would wait for what the bug stops (a recovery, a stall verdict) runs under a bound, well
above what its tests take unmutated: its tests fail there. The last run is the verdict and the seconds its tests
took, as `make mutants` (or `make mutants MUTANTS="word ..."`) last recorded them on the machine that ran it;
`python -m tests.support.proof_page` writes this page again from `tests/support/mutant_list.py`.

"""
HEADER = "| mutant (the deliberate bug) | row it breaks | file | tests run | last run |\n|---|---|---|---|---|\n"


def recorded(text: str) -> dict[str, str]:
    """Each mutant's last run as the page says it, by id."""
    return {m["id"]: m["last"] for m in map(_LINE.match, text.splitlines()) if m}


def last_seconds(text: str) -> dict[str, int]:
    """Each mutant's seconds at its last run, by id (none for one not run yet)."""
    return {k: int(found[1]) for k, v in recorded(text).items() if (found := _SECONDS.match(v))}


def _tests(mutant: Mutant) -> str:
    names = ", ".join(f"`{test.partition('::')[2] or test}`" for test in mutant.tests)
    return names + (f" (bound {mutant.bound} s)" if mutant.bound else "")


def render(mutants: Iterable[Mutant], runs: dict[str, str]) -> str:
    """The page: every mutant with its last run (``runs``, by id), then what the runs add up to."""
    mutants = list(mutants)
    lines = [f"| `{m.id}` | {m.row}… | `{m.path}` | {_tests(m)} | {runs.get(m.id, NOT_RUN)} |\n" for m in mutants]
    last = [runs.get(m.id, NOT_RUN) for m in mutants]
    killed = sum(run.startswith("killed,") for run in last)
    seconds = sum(int(found[1]) for found in map(_SECONDS.match, last) if found)
    unrun = sum(run == NOT_RUN for run in last)
    total = (
        f"**{len(mutants)} mutants, {killed} killed at their last run ({killed / max(len(mutants), 1):.0%})**"
        + (f", {unrun} not run yet" if unrun else "")
        + f"; their last runs add up to {seconds // 60} min {seconds % 60} s.\n"
    )
    return HEAD + total + "\n" + HEADER + "".join(lines)


def record(outcomes: Iterable[Outcome], page: Path = PAGE) -> None:
    """The page written again with these outcomes as their mutants' last runs."""
    from tests.support.mutant_list import MUTANTS

    runs = recorded(page.read_text()) if page.exists() else {}
    runs |= {o.mutant.id: f"{o.verdict}, {o.seconds:.0f} s" for o in outcomes}
    page.write_text(render(MUTANTS, runs))


def main() -> int:
    record([])
    return 0


if __name__ == "__main__":
    sys.exit(main())
