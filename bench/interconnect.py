"""The interconnect pre-flight's cost: a local job of 2 nodes × 1 process, with the pre-flight on (gloo's all-reduce
sweep between the nodes before the program starts) and off, alternated. Reports the seconds the pre-flight itself
took (its own metric record, torch's start in its process included) and the run's wall time against the same run
without it."""

from __future__ import annotations

import time

from .common import FIXTURES, Result, median, timed

JOB = FIXTURES / "tinyjob" / "job.yaml"
SHAPE = ["local.nodes=2", "local.processes_per_node=1", "code.args=[--epochs, 1]", "checkpoint.enabled=false"]


def _run(preflight: str) -> float | None:
    """One run; the pre-flight's own seconds (None when off)."""
    from cloudddp.api import Job
    from cloudddp.backends.status import RunState

    run = Job.load(JOB, [*SHAPE, f"distribution.preflight={preflight}"]).submit("local")
    status = run.wait(timeout=300, poll=0.1)
    if status.state is not RunState.SUCCEEDED:
        raise RuntimeError(f"the {preflight} run ended {status.state}: {status.message}")
    found = [r.values["interconnect_seconds"] for r in run.metrics() if "interconnect_seconds" in r.values]
    return found[0] if found else None


def measure(tiny: bool) -> list[Result]:
    reps = 1 if tiny else 3
    on_wall, off_wall, own = [], [], []
    for _ in range(reps):  # alternate, so drift in machine load hits both alike
        start = time.perf_counter()
        seconds = _run("on")
        on_wall.append(time.perf_counter() - start)
        off_wall.append(timed(lambda: _run("off")))
        if seconds is not None:
            own.append(seconds)
    ours, base = median(on_wall), median(off_wall)
    preflight = median(own) if own else float("nan")
    return [
        Result(
            case="interconnect pre-flight",
            metric="seconds of the pre-flight in a 2-node × 1 local gloo job (1 MiB and 16 MiB all-reduces)",
            ours=preflight,
            theirs=None,
            unit="s",
            target="≤ 10 s on CPU",
            passed=preflight <= 10,
            details={"preflight_s": own, "reps": reps},
        ),
        Result(
            case="interconnect pre-flight",
            metric="wall time of the run with the pre-flight, against the same run without it",
            ours=ours,
            theirs=base,
            unit="s",
            ratio=ours / base,
            better="lower",
            baseline="distribution.preflight: off",
            details={"on_s": on_wall, "off_s": off_wall, "overhead_s": round(ours - base, 2)},
        ),
    ]
