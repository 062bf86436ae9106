"""What taking a rank's stacks costs the rank: the hang doctor's record of every thread (``sys._current_frames``
with each frame's source line, as JSON: what each rank sends on a hang) against torch's way, faulthandler's
``dump_traceback`` of all threads into a file (what ``cloudddp stacks`` and the stall watchdog ask for by signal),
and py-spy's ``dump`` where py-spy is installed. Measured in a process whose main thread is deep in a call chain
and which runs 8 more threads (a DataLoader's pin-memory thread, the logger's, ...), alternated, medians; the time
is how long the rank's Python is held (the GIL), that is the pause a capture costs the training."""

from __future__ import annotations

import faulthandler
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time

from .common import Result, median

THREADS, DEPTH = 8, 40


def _deep(n: int, ready: threading.Event, done: threading.Event) -> None:
    if n:
        _deep(n - 1, ready, done)
        return
    ready.set()
    done.wait()


def measure(tiny: bool) -> list[Result]:
    from cloudddp.injob import hang

    reps = 20 if tiny else 300
    done = threading.Event()
    started = []
    for _ in range(THREADS):
        ready = threading.Event()
        threading.Thread(target=_deep, args=(DEPTH, ready, done), daemon=True).start()
        started.append(ready)
    for ready in started:
        ready.wait()
    ours, theirs = [], []
    with tempfile.TemporaryFile("w+") as sink:
        for _ in range(reps):
            start = time.perf_counter()
            json.dumps(hang.snapshot(0))
            ours.append(time.perf_counter() - start)
            start = time.perf_counter()
            faulthandler.dump_traceback(file=sink, all_threads=True)
            theirs.append(time.perf_counter() - start)
    spy = _py_spy(3 if tiny else 10)
    done.set()
    results = [
        Result(
            case="stack capture",
            metric=f"pause of one rank while its stacks are taken ({THREADS + 1} threads, {DEPTH} frames deep)",
            ours=median(ours) * 1000,
            theirs=median(theirs) * 1000,
            unit="ms",
            ratio=median(theirs) / median(ours),
            baseline="faulthandler.dump_traceback(all_threads=True)",
            target="≤ 50 ms",
            passed=median(ours) <= 0.05,
            details={"reps": reps},
        )
    ]
    if spy is not None:
        results.append(
            Result(
                case="stack capture",
                metric="py-spy dump of the same process (wall time; py-spy pauses it while it reads)",
                ours=median(ours) * 1000,
                theirs=spy * 1000,
                unit="ms",
                ratio=spy / median(ours),
                baseline="py-spy dump --pid",
            )
        )
    return results


def _py_spy(reps: int) -> float | None:
    tool = shutil.which("py-spy")
    if tool is None:
        return None
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        if subprocess.run([tool, "dump", "--pid", str(os.getpid())], capture_output=True).returncode:
            return None  # no ptrace rights here
        times.append(time.perf_counter() - start)
    return median(times)
