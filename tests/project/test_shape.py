"""The shape check of ``make lint`` (tests/support/shape.py) fails on a long function or module, names it with its
length and limit, and holds its allow-list to a ceiling per entry, the hard limits, and entries still needed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.cli import ROOT
from tests.support.shape import ALLOWED, HARD_FUNCTION_LINES, HARD_MODULE_LINES, Allowance, check


def _function(name: str, lines: int, indent: str = "") -> str:
    """A function of exactly ``lines`` lines (its ``def`` line included)."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 2))
    return f"{indent}def {name}() -> None:\n{body}{indent}    return None\n"


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    package = tmp_path / "cloudddp"
    for rel, text in {"__init__.py": "", **files}.items():
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text(text)
    return package


def _shape(package: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.support.shape", str(package)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_a_long_function_or_module_fails_the_check_naming_it_its_length_and_its_limit(tmp_path: Path) -> None:
    package = _tree(
        tmp_path,
        {
            "x.py": "\n\n" + _function("f", 91) + "\n\nclass Thing:\n" + _function("method", 81, indent="    "),
            "wing/big.py": "\n" * 501,
        },
    )
    result = _shape(package)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "cloudddp/wing/big.py: 501 lines (limit 500)",
        "cloudddp/x.py:3 f: 91 lines (limit 80)",
        "cloudddp/x.py:97 Thing.method: 81 lines (limit 80)",
    ], result.stdout
    assert "3 found" in result.stderr


def test_functions_and_modules_at_the_limits_pass(tmp_path: Path) -> None:
    source = _function("f", 80) + "\n\n" + _function("g", 80)
    package = _tree(tmp_path, {"x.py": source + "\n" * (500 - len(source.splitlines()))})
    result = _shape(package)
    assert (result.returncode, result.stdout) == (0, ""), result.stdout + result.stderr


def test_an_allowance_holds_its_entry_to_its_own_ceiling_and_a_needless_entry_is_reported(tmp_path: Path) -> None:
    package = _tree(tmp_path, {"x.py": _function("f", 91) + "\n\n" + _function("g", 97) + "\n\n" + _function("h", 10)})
    allowed = {
        "cloudddp/x.py:f": Allowance(95, "one table of cases, read top to bottom"),
        "cloudddp/x.py:g": Allowance(95, "the same"),
        "cloudddp/x.py:h": Allowance(90, "grew once"),
        "cloudddp/gone.py": Allowance(550, "moved away"),
    }
    assert check(package, allowed) == [
        "cloudddp/x.py:94 g: 97 lines (limit 95)",
        "allow-list: cloudddp/x.py:h: 10 lines, within 80: remove its entry",
        "allow-list: cloudddp/gone.py: no such module or function: remove its entry",
    ]


def test_no_allowance_is_above_the_hard_limits(tmp_path: Path) -> None:
    package = _tree(tmp_path, {"x.py": _function("f", 120), "big.py": "\n" * 650})
    allowed = {"cloudddp/x.py:f": Allowance(120, "too long"), "cloudddp/big.py": Allowance(650, "too big")}
    assert check(package, allowed) == [
        f"allow-list: cloudddp/x.py:f: ceiling 120 is over the hard limit {HARD_FUNCTION_LINES}",
        f"allow-list: cloudddp/big.py: ceiling 650 is over the hard limit {HARD_MODULE_LINES}",
    ]
    for key, allowance in ALLOWED.items():
        assert allowance.reason.strip(), f"{key} has no reason"
        assert allowance.ceiling <= (HARD_FUNCTION_LINES if ":" in key else HARD_MODULE_LINES), key
