"""The benchmark suite runs (once, tiny): it proves the cases work; the numbers come from `make bench`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import ROOT
from tests.support.waiting import LOADED

pytestmark = pytest.mark.slow


@pytest.mark.timeout(3 * LOADED)  # about 150 s alone; over 900 s on a machine running two suites at once
def test_every_bench_case_runs_at_tiny_size(tmp_path: Path) -> None:
    from bench.__main__ import CASES

    result = subprocess.run(
        [sys.executable, "-m", "bench", "--tiny", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=3 * LOADED,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    data = json.loads((tmp_path / "latest.json").read_text())
    assert data["tiny"] is True
    cases = {r["case"] for r in data["results"]}
    assert len(cases) == len(CASES), cases
    for r in data["results"]:
        assert r["unit"], r
        zero_is_the_target = r["unit"] == "bytes" and r["target"] == "0 bytes"  # bytes re-uploaded by a 2nd submit
        assert r["ours"] > 0 or (zero_is_the_target and r["ours"] == 0), r  # a measured number
        if r["theirs"] is not None:
            assert r["theirs"] > 0, r
    assert "| case |" in (tmp_path / "latest.md").read_text()
