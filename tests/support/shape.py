"""The shape of cloudddp's code, checked by ``make lint``: no function over 80 lines, no module over 500.

A long function mixes decisions; a long module, several jobs. Where one is longer for a reason, it has an entry in
:data:`ALLOWED` with that reason and a ceiling of its own, never above the hard limits (100 lines for a function,
600 for a module): the allowance stops it growing, and an entry that is no longer needed is reported so that the
list stays short.

    python -m tests.support.shape          # the checkout's cloudddp/, with ALLOWED
    python -m tests.support.shape PATH     # another package folder (a copy, a test's tree), without ALLOWED

Each finding is one line, ``cloudddp/x.py:12 f: 91 lines (limit 80)`` (``Class.method`` for a method) or
``cloudddp/x.py: 535 lines (limit 500)``; the exit status is 1 when there is any.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

FUNCTION_LINES, MODULE_LINES = 80, 500
"""The limits every function and module keeps."""
HARD_FUNCTION_LINES, HARD_MODULE_LINES = 100, 600
"""The most an allow-listed function or module may have."""
PACKAGE = Path(__file__).resolve().parents[2] / "cloudddp"


@dataclass(frozen=True)
class Allowance:
    """A function or module allowed over the limit: up to ``ceiling`` lines, for ``reason``."""

    ceiling: int
    reason: str


ALLOWED: dict[str, Allowance] = {
    # "cloudddp/path.py" for a module, "cloudddp/path.py:Class.method" for a function: Allowance(ceiling, "why")
}


@dataclass(frozen=True)
class Length:
    """A function's or a module's length: ``key`` is its allow-list key, ``where`` how a finding names it."""

    key: str
    where: str
    lines: int
    function: bool


def lengths(package: Path) -> Iterator[Length]:
    """Every module under ``package`` and every function in them (methods and nested functions included)."""
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).as_posix()
        source = path.read_text(encoding="utf-8")
        yield Length(rel, rel, len(source.splitlines()), function=False)
        yield from _functions(rel, ast.parse(source, filename=rel), "")


def _functions(rel: str, node: ast.AST, prefix: str) -> Iterator[Length]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = (child.end_lineno or child.lineno) - child.lineno + 1
            yield Length(f"{rel}:{prefix}{child.name}", f"{rel}:{child.lineno} {prefix}{child.name}", lines, True)
        named = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        yield from _functions(rel, child, f"{prefix}{child.name}." if named else prefix)


def check(package: Path, allowed: Mapping[str, Allowance]) -> list[str]:
    """What is over its limit under ``package``, and what is wrong with ``allowed``, one line each."""
    problems = []
    for key, allowance in allowed.items():
        hard = HARD_FUNCTION_LINES if ":" in key else HARD_MODULE_LINES
        if allowance.ceiling > hard:
            problems.append(f"allow-list: {key}: ceiling {allowance.ceiling} is over the hard limit {hard}")
    used = set()
    for length in lengths(package):
        limit = FUNCTION_LINES if length.function else MODULE_LINES
        allowance = allowed.get(length.key)
        if allowance is not None:
            used.add(length.key)
            if length.lines <= limit:
                problems.append(f"allow-list: {length.key}: {length.lines} lines, within {limit}: remove its entry")
                continue
            limit = allowance.ceiling
        if length.lines > limit:
            problems.append(f"{length.where}: {length.lines} lines (limit {limit})")
    problems += [
        f"allow-list: {key}: no such module or function: remove its entry" for key in sorted(allowed.keys() - used)
    ]
    return problems


def main(argv: list[str]) -> int:
    package, allowed = (Path(argv[0]), {}) if argv else (PACKAGE, ALLOWED)
    problems = check(package, allowed)
    for line in problems:
        print(line)
    if problems:
        print(
            f"{len(problems)} found: split a function over {FUNCTION_LINES} lines or a module over {MODULE_LINES} "
            "where it does several things; an allowance (ALLOWED in tests/support/shape.py) needs a reason",
            file=sys.stderr,
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
