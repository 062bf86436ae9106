"""What a local run held: GPU-hours or CPU time from the supervisor's records; this machine has no price."""

from __future__ import annotations

import time

from cloudddp.backends.local.record import LocalRunStatus
from cloudddp.backends.local.request import LocalRequest
from cloudddp.catalog.bill import Bill, Figure


def bill(request: LocalRequest, st: LocalRunStatus, *, final: bool) -> Bill:
    """Held time from the supervisor's clock (``st``: the run's status.json), as GPU-hours (one GPU per process) or
    the CPU time the run's processes used; ``final``: the run has ended."""
    device, nodes, procs = request.device, request.nnodes, request.nproc_per_node
    started, ended = st.started_at, st.ended_at
    until = ended if ended is not None else (None if final else time.time())
    ran = max(0.0, until - started) if started is not None and until is not None else 0.0
    figures = [
        Figure(
            "processes ran",
            round(ran, 3),
            "s",
            "status.json: started_at (torchrun started) → "
            + ("ended_at (the supervisor recorded the end)" if ended is not None else "now (running)"),
        ),
        Figure("nodes × processes", f"{nodes} × {procs}", "", "plan.json: torchrun agents on this machine"),
    ]
    hours: float | None
    if device == "cuda":
        hours, unit = ran * nodes * procs / 3600, "GPU-hours"
        figures.append(Figure("GPU-hours", round(hours, 6), "h", "wall time × processes (one GPU per process)"))
    else:
        hours, unit = _cpu_hours(st.cpu_s, figures), "CPU-hours"
    return Bill(
        final=final,
        size=f"local:{device}",
        nodes=nodes,
        processes_per_node=procs,
        billed_s=ran,
        price_per_hour=None,
        cost=None,
        resource_hours=hours,
        resource_unit=unit,
        ran_s=ran,
        figures=tuple(figures),
        notes=("no price: this machine's cost is not in dollars",),
    )


def _cpu_hours(cpu: float | None, figures: list[Figure]) -> float | None:
    """The run's CPU time in hours, its figure added to ``figures``; None until the supervisor records it at the
    end."""
    if cpu is None:
        figures.append(Figure("CPU time", None, "s", "known when the run ends"))
        return None
    figures.append(
        Figure(
            "CPU time",
            round(cpu, 3),
            "s",
            "getrusage of the run's processes (user + system CPU time), recorded when the run ended",
        )
    )
    return cpu / 3600
