"""Wall time and peak memory of a whole command, as GNU time (Debian's ``time`` package) reports them.

Without GNU time, a small Python wrapper reads the same figure from ``getrusage`` (the peak resident
set of the command and of every process it waited for) and each result says so.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from .common import ROOT

GNU_TIME = Path("/usr/bin/time")
_WRAPPER = (
    "import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(rc)"
)


@dataclass(frozen=True)
class Measured:
    wall_s: float
    peak_mb: float


@cache
def how_memory_is_measured() -> str:
    try:
        answer = subprocess.run([str(GNU_TIME), "--version"], capture_output=True, text=True, check=False)
        version = answer.stdout + answer.stderr
    except OSError:
        version = ""
    if "GNU" in version:
        return "GNU time"
    print("   GNU time not installed (apt-get install time): peak memory read with getrusage instead", file=sys.stderr)
    return "getrusage (GNU time not installed)"


def measured(
    argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 1800
) -> Measured:
    """Run ``argv`` once (its output discarded); its wall time, the whole process as a person waits for
    it, and its peak resident memory."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        if how_memory_is_measured() == "GNU time":
            wrapped = [str(GNU_TIME), "-f", "%M", "-o", report.name, *argv]
        else:
            wrapped = [sys.executable, "-c", _WRAPPER, *argv]
        started = time.perf_counter()
        result = subprocess.run(
            wrapped,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd or ROOT,
            check=False,
            env=full_env,
            timeout=timeout,
        )
        wall = time.perf_counter() - started
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}):\n{result.stderr[-3000:]}")
        text = report.read() if wrapped[0] == str(GNU_TIME) else result.stderr
    peak_kb = int(text.strip().splitlines()[-1])
    return Measured(wall, peak_kb / 1024)
