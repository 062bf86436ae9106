"""How long a local run trains: the plan's estimate, from a step time measured here or the spec's own."""

from __future__ import annotations

from cloudddp.catalog.sizing import find_workload
from cloudddp.catalog.stepstore import StepStore
from cloudddp.plan import Estimate
from cloudddp.spec.model import JobSpec, job_key


def time_estimate(spec: JobSpec, device: str, nodes: int, procs: int) -> Estimate | None:
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
    return Estimate(step_s=step.seconds, steps=steps, training_s=steps * step.seconds, step_basis=step.basis).rounded()
