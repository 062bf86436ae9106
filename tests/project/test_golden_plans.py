"""Every backend's rendered plan for a set of jobs equals the one kept under tests/golden/, byte for byte
(:mod:`tests.support.golden`): a change that moves a request shows in one diff, and is kept with
``make golden``."""

from __future__ import annotations

import difflib

from tests.support.cli import ROOT
from tests.support.golden import BACKENDS, CASES, GOLDEN, file_of, render_all


def test_every_backends_plan_of_every_golden_job_is_what_tests_golden_keeps() -> None:
    found = render_all()
    assert set(found) == {file_of(case, backend) for case in CASES for backend in BACKENDS}
    differ = [path for path, text in found.items() if not path.exists() or path.read_text() != text]
    diff = []
    for path in differ[:3]:
        kept = path.read_text().splitlines(keepends=True) if path.exists() else []
        name = str(path.relative_to(ROOT))
        diff += difflib.unified_diff(kept, found[path].splitlines(keepends=True), name, f"{name} (rendered now)")
    assert not differ, (
        f"{len(differ)} golden plan(s) differ ({', '.join(str(p.relative_to(GOLDEN)) for p in differ)}); if the "
        "change is meant, `make golden` keeps it:\n" + "".join(diff)[:20000]
    )
