"""Small shared pieces of the benchmark cases: timing, percentiles, subprocess helpers, results."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"


@dataclass
class Result:
    case: str
    metric: str
    ours: float
    theirs: float | None
    unit: str
    ratio: float | None = None
    """theirs / ours for times (>1: we are faster), ours / theirs for throughputs; see ``better``."""
    better: str = "lower"
    baseline: str = ""
    target: str = ""
    passed: bool | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run(
    argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result


def cloudddp(*args: str, env: dict[str, str] | None = None) -> list[str]:
    return [sys.executable, "-m", "cloudddp", *args]


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0.0
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
