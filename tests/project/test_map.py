"""The map check of ``make lint`` (tests/support/map.py): a module missing from its package's docstring or from
docs/architecture.md fails, naming it, and so does a name of a module that is gone."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.cli import ROOT
from tests.support.map import check_architecture, check_docstrings


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "cloudddp", tmp_path / "cloudddp", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "architecture.md", tmp_path / "docs" / "architecture.md")
    return tmp_path


def _map(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.support.map", str(tree)], capture_output=True, text=True, cwd=ROOT, timeout=60
    )


def test_the_checkouts_map_names_every_module() -> None:
    assert check_docstrings(ROOT) + check_architecture(ROOT) == []


def test_a_new_module_named_nowhere_fails_the_check_in_its_wing_and_on_the_architecture_page(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    (tree / "cloudddp" / "runs" / "lottery.py").write_text('"""Which run goes first."""\n')
    (tree / "cloudddp" / "backends" / "local" / "dice.py").write_text('"""Rolls."""\n')
    result = _map(tree)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "cloudddp/backends/local/__init__.py: does not name dice (cloudddp/backends/local/dice.py)",
        "cloudddp/runs/__init__.py: does not name lottery (cloudddp/runs/lottery.py)",
        "docs/architecture.md: does not name cloudddp/runs/lottery.py",
    ], result.stdout
    assert "3 found" in result.stderr


def test_a_module_dropped_from_its_docstring_or_a_name_of_one_that_is_gone_fails_the_check(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    init = tree / "cloudddp" / "runs" / "__init__.py"
    init.write_text(init.read_text().replace(":mod:`~cloudddp.runs.budget`", "the watch", 1))
    (tree / "cloudddp" / "observe" / "units.py").unlink()
    page = tree / "docs" / "architecture.md"
    page.write_text(page.read_text() + "\nSee `spec/registry.py`.\n")
    result = _map(tree)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "cloudddp/observe/__init__.py: names cloudddp.observe.units, which is no module",
        "cloudddp/runs/__init__.py: does not name budget (cloudddp/runs/budget.py)",
        "docs/architecture.md: names spec/registry.py, which is no file",
        "docs/architecture.md: its diagram names units.py, which is no module",
    ], result.stdout


def test_a_package_without_a_docstring_fails_the_check(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    (tree / "cloudddp" / "spec" / "__init__.py").write_text("")
    assert check_docstrings(tree) == [
        "cloudddp/spec/__init__.py: no docstring: say what this package owns and may import"
    ]
