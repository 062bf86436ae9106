"""``make mutants``: break the code behind each guarantee, one deliberate bug at a time, and check that the tests
the guarantee names fail.

Each :class:`Mutant` (the list is :data:`tests.support.mutant_list.MUTANTS`) is one exact text replacement in
one file. The driver copies the project once (the files git tracks or would track) into a temporary folder,
applies each mutant there alone, runs that mutant's tests with pytest from the copy, and puts the file back:
the working tree is never changed. A mutant is *killed* when its tests fail (pytest's exit status 1),
*survived* when they pass; any other status (no tests collected, an interrupted run, a mutant whose text is
no longer in its file) is an *error*, which counts as not killed. It prints one line per mutant, then the
kill ratio, and exits 1 unless every mutant was killed.

    python -m tests.support.mutants                 # every mutant
    python -m tests.support.mutants secret budget   # those whose id contains one of the words
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.cli import ROOT

SHARED = (".venv", "node_modules", ".cache")
"""Folders the copy links to instead of copying: the tools, Azurite and the toolkits, never mutated."""


@dataclass(frozen=True)
class Mutant:
    id: str
    """A short name, unique in the list."""
    row: str
    """Words from the start of the row of docs/guarantees.md the mutant breaks (they name one row)."""
    path: str
    """The file it changes, from the project's root."""
    old: str
    """Text found exactly once in that file..."""
    new: str
    """...and what it becomes: the deliberate bug."""
    tests: tuple[str, ...]
    """The tests the row names that must fail (pytest node ids)."""


@dataclass(frozen=True)
class Outcome:
    mutant: Mutant
    verdict: str  # killed, survived, error
    seconds: float
    detail: str


def copy_project(into: Path) -> Path:
    """The project's files (tracked, and untracked ones git does not ignore) under ``into``; shared tool
    folders linked."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    for rel in filter(None, listed.decode().split("\0")):
        source = ROOT / rel
        if rel.split("/")[0] in SHARED or not source.is_file():
            continue
        target = into / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
    for name in SHARED:
        if (ROOT / name).exists():
            (into / name).symlink_to((ROOT / name).resolve())
    return into


def run_one(mutant: Mutant, copy: Path) -> Outcome:
    """Apply ``mutant`` in ``copy``, run its tests there, put the file back."""
    path = copy / mutant.path
    original = path.read_text()
    if original.count(mutant.old) != 1:
        return Outcome(mutant, "error", 0.0, f"its text is in {mutant.path} {original.count(mutant.old)} times")
    path.write_text(original.replace(mutant.old, mutant.new))
    env = {
        **os.environ,
        "PYTHONPATH": str(copy),
        "PATH": f"{copy / 'node_modules' / '.bin'}:{os.environ.get('PATH', '')}",
    }
    started = time.monotonic()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-o", "addopts=", *mutant.tests],
            cwd=copy,
            env=env,
            capture_output=True,
            text=True,
        )
    finally:
        path.write_text(original)
    seconds = time.monotonic() - started
    last = (result.stdout.strip().splitlines() or ["(no output)"])[-1]
    verdict = {1: "killed", 0: "survived"}.get(result.returncode, "error")
    return Outcome(mutant, verdict, seconds, f"pytest exit {result.returncode}: {last}")


def main(words: list[str]) -> int:
    from tests.support.mutant_list import MUTANTS

    chosen = [m for m in MUTANTS if not words or any(w in m.id for w in words)]
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="cloudddp-mutants-") as tmp:
        copy = copy_project(Path(tmp))
        for mutant in chosen:
            outcome = run_one(mutant, copy)
            outcomes.append(outcome)
            print(f"{outcome.verdict:8} {outcome.seconds:6.0f} s  {mutant.id}: {outcome.detail}", flush=True)
    killed = sum(o.verdict == "killed" for o in outcomes)
    print(f"\nkilled {killed} of {len(outcomes)} mutants ({killed / max(len(outcomes), 1):.0%})", flush=True)
    for o in outcomes:
        if o.verdict != "killed":
            print(f"  not killed: {o.mutant.id} ({o.verdict}) in {o.mutant.path}: {o.detail}", flush=True)
    return 0 if killed == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
