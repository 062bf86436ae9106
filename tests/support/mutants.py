"""``make mutants``: break the code behind each guarantee, one deliberate bug at a time, and check that the tests
the guarantee names fail.

Each :class:`Mutant` (the list is :data:`tests.support.mutant_list.MUTANTS`) is one exact text replacement in
one file. The driver copies the project (the files git tracks or would track) into a temporary folder, once per
job (``-j N`` runs N mutants at a time, the longest of the last runs first), applies each mutant there alone,
runs that mutant's tests with pytest from the copy, and puts the file back: the checkout's code is never changed.
A mutant is *killed* when its tests fail (pytest's exit status 1), *survived* when they pass; any other status
(no tests collected, an interrupted run, a mutant whose text is no longer in its file) is an *error*, which counts
as not killed. It prints one line per mutant, then the kill ratio, records each verdict and time in docs/proof.md
(:mod:`tests.support.proof_page`), and exits 1 unless every mutant was killed.

A mutant whose tests would wait out their own long bounds for something that never comes (a recovery, a stall
verdict) has a ``bound``: its tests' timeout for that run (pytest-timeout, ahead of any timeout the test marks
itself; this module is the pytest plugin that sets it), well above what they take unmutated on a loaded machine.
Its tests failing at that bound kills it.

    python -m tests.support.mutants                 # every mutant, one at a time
    python -m tests.support.mutants -j 2            # two at a time (make mutants)
    python -m tests.support.mutants secret budget   # those whose id contains one of the words
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cli import ROOT

BOUND_ENV = "CLOUDDDP_MUTANT_BOUND"
"""The variable that hands a mutant's bound to its pytest run (read by :func:`pytest_collection_modifyitems`)."""
# The test folders the mutant lists name their tests by.
LOCAL = "tests/backends/local/"
SM = "tests/backends/sagemaker/"
AZ = "tests/backends/azureml/"
SLURM = "tests/backends/slurm/"
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
    bound: int | None = None
    """Seconds its tests may run before they count as failed: only where they wait for what the bug stops, set
    well above what they take unmutated."""


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
    bounded: list[str] = []
    if mutant.bound:
        env[BOUND_ENV], bounded = str(mutant.bound), ["-p", "tests.support.mutants"]
    started = time.monotonic()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-o", "addopts=", *bounded]
            + list(mutant.tests),
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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """As the plugin of a bounded mutant's pytest run: each test's timeout is the bound, ahead of its own."""
    bound = os.environ.get(BOUND_ENV)
    if bound:
        for item in items:
            item.add_marker(pytest.mark.timeout(int(bound)), append=False)


def run_all(chosen: list[Mutant], jobs: int) -> Iterator[Outcome]:
    """Each mutant's outcome as it comes, ``jobs`` at a time, each job in a copy of its own."""
    with tempfile.TemporaryDirectory(prefix="cloudddp-mutants-") as tmp:
        os.chmod(tmp, 0o755)  # the rigs' second user runs the copy's code too, as she runs the checkout's
        copies: queue.SimpleQueue[Path] = queue.SimpleQueue()
        for job in range(jobs):
            copies.put(copy_project(Path(tmp) / str(job)))

        def one(mutant: Mutant) -> Outcome:
            copy = copies.get()
            try:
                return run_one(mutant, copy)
            finally:
                copies.put(copy)

        with ThreadPoolExecutor(jobs) as pool:
            yield from (future.result() for future in as_completed([pool.submit(one, m) for m in chosen]))


def main(argv: list[str]) -> int:
    from tests.support.mutant_list import MUTANTS
    from tests.support.proof_page import PAGE, last_seconds, record

    jobs, words = (int(argv[1]), argv[2:]) if argv[:1] == ["-j"] else (1, argv)
    chosen = [m for m in MUTANTS if not words or any(w in m.id for w in words)]
    took = last_seconds(PAGE.read_text()) if PAGE.exists() else {}
    chosen.sort(key=lambda m: -took.get(m.id, 0))  # the longest first: the jobs end together
    outcomes = []
    for outcome in run_all(chosen, max(jobs, 1)):
        outcomes.append(outcome)
        print(f"{outcome.verdict:8} {outcome.seconds:6.0f} s  {outcome.mutant.id}: {outcome.detail}", flush=True)
        record([outcome])  # as it goes: an interrupted run keeps what it learnt
    killed = sum(o.verdict == "killed" for o in outcomes)
    print(f"\nkilled {killed} of {len(outcomes)} mutants ({killed / max(len(outcomes), 1):.0%})", flush=True)
    for o in outcomes:
        if o.verdict != "killed":
            print(f"  not killed: {o.mutant.id} ({o.verdict}) in {o.mutant.path}: {o.detail}", flush=True)
    return 0 if killed == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
