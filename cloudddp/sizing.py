"""From a job spec to a size on a cloud: the catalog's selection, fed with what the spec says.

The workload for the cost model comes from the shared training script's arguments when they are
there (``--model``, ``--dataset``, ``--epochs``, ``--batch-size``); otherwise cost and efficiency
are shown as unknown rather than guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .catalog import Requirements, Selection, Sku, Workload, find, select, workload_for_model
from .catalog.model import DATASET_SAMPLES
from .errors import UserError
from .spec import JobSpec

Cloud = str  # a cloud of the catalog ("azure", "aws"), as a backend declares it


def script_arg(args: list[str], name: str) -> str | None:
    """The value of ``--name value`` or ``--name=value`` in a script's argument list."""
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def workload_for_spec(spec: JobSpec) -> Workload | None:
    args = spec.code.args
    model = script_arg(args, "--model") or ("cnn" if spec.code.entry == "train.py" else None)
    dataset = script_arg(args, "--dataset") or "digits"
    try:
        epochs = int(script_arg(args, "--epochs") or 10)
        batch = int(script_arg(args, "--batch-size") or 64)
    except ValueError:
        return None
    if model is None or dataset not in DATASET_SAMPLES:
        return None
    return workload_for_model(model, DATASET_SAMPLES[dataset], epochs, batch)


def requirements_for(spec: JobSpec, cloud: Cloud, instance_type: str | None) -> Requirements:
    r = spec.resources
    return Requirements(
        cloud=cloud,
        nodes=r.nodes,
        gpus_per_node=r.gpus_per_node,
        accelerator=r.accelerator,
        min_gpu_memory_gb=r.min_gpu_memory_gb,
        interconnect=r.interconnect,
        spot=r.spot,
        smddp=spec.distribution.backend == "smddp",
        max_price_per_hour=r.max_price_per_hour,
        instance_type=instance_type,
        workload=workload_for_spec(spec),
    )


def choose(spec: JobSpec, cloud: Cloud, instance_type: str | None) -> Selection:
    """The size for ``spec`` on ``cloud``; a UserError naming the reasons when nothing fits."""
    if spec.resources.gpus_per_node == 0:
        if instance_type:
            return Selection(requirements_for(spec, cloud, instance_type), [], None)
        raise UserError(
            "resources.gpus_per_node is 0 (CPU training): name a CPU size for this cloud",
            hint="name a CPU size in the backend's section (e.g. sagemaker.instance_type: ml.m5.xlarge, "
                 "azureml.vm_size: Standard_D4s_v3)",
        )
    selection = select(requirements_for(spec, cloud, instance_type))
    if selection.chosen is None:
        reasons = [f"{c.sku.size}: {'; '.join(c.reasons)}" for c in selection.candidates[:6]]
        what = f"{instance_type} cannot run this job" if instance_type else "no size in the catalog fits this job"
        raise UserError(what + ":\n    " + "\n    ".join(reasons),
                        hint="`cloudddp skus --explain` lists every size with its verdict; relax resources.* or name a size")
    return selection


@dataclass
class SizeDecision:
    """The size a cloud render uses, with what to tell the user about it."""

    size: str
    sku: Sku | None
    decisions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    estimate: dict[str, Any] | None = None


def decide(spec: JobSpec, cloud: Cloud, named: str | None, label: str) -> SizeDecision:
    """``choose`` plus the lines a plan shows: ``<label> <size>: why``, the warnings, the estimate."""
    selection = choose(spec, cloud, named)
    size = named or (selection.chosen.sku.size if selection.chosen else "")
    decision = SizeDecision(size, find(size) if size else None)
    if selection.chosen is not None:
        decision.decisions.append(f"{label} {size}: " + "; ".join(selection.chosen.reasons))
        decision.warnings += selection.chosen.warnings
        if selection.chosen.estimate:
            decision.estimate = selection.chosen.estimate.to_dict()
    return decision
