"""How long a local run trains: the plan's estimate, from a step time measured here or the spec's own."""

from __future__ import annotations

from typing import Any

from cloudddp.catalog.sizing import find_workload
from cloudddp.catalog.stepstore import StepStore
from cloudddp.spec.model import JobSpec, job_key


def time_estimate(spec: JobSpec, device: str, nodes: int, procs: int) -> dict[str, Any] | None:
    """How long the training takes here, from a step time measured on an earlier run of this job at this shape,
    else ``resources.step_time``; None without either (the catalog's model is for cloud GPUs, not this machine)."""

    measured = StepStore().for_shape(job_key(spec), nodes, procs).get(f"local:{device}")
    if measured is None and spec.resources.step_time is None:
        return None

    workload = find_workload(spec).workload
    epochs = workload.epochs or None
    step = measured.step_time(epochs) if measured is not None else workload.step_time
    if step is None:
        return None
    steps = workload.steps or step.steps or workload.steps_for(nodes * procs)
    if steps is None:
        return None
    training = steps * step.seconds
    hours = training * nodes * procs / 3600 if device == "cuda" else None
    return {
        "step_s": step.seconds,
        "steps": steps,
        "training_s": training,
        "step_basis": step.basis,
        "price_per_hour": None,
        "total_cost": None,
        "gpu_hours": hours,
    }
