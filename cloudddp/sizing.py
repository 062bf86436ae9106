"""From a job spec to a size on a cloud: the catalog's selection, fed with what the spec says.

The workload for the cost model comes from the shared training script's arguments when they are
there (``--model``, ``--dataset``, ``--epochs``, ``--batch-size``) and the spec's checkpoint settings;
otherwise cost and efficiency are shown as unknown rather than guessed. ``cloud`` is the plain string a
backend declares for its sizes ("azure", "aws"); the catalog checks it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .catalog import (
    Requirements,
    Selection,
    Sku,
    Workload,
    find,
    replacement_for,
    select,
    workload_for_model,
)
from .catalog.model import DATASET_BYTES, DATASET_SAMPLES
from .errors import UserError
from .spec import JobSpec

SIZE_FIELDS = {"azure": "azureml.vm_size", "aws": "sagemaker.instance_type"}
"""The spec field that names a size on each cloud, for error messages."""


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
    every = spec.checkpoint.every_epochs if spec.checkpoint.enabled else 0
    return workload_for_model(model, DATASET_SAMPLES[dataset], epochs, batch, dataset_bytes=DATASET_BYTES[dataset],
                              checkpoint_every=every)


def _idle_s(spec: JobSpec, cloud: str) -> float | None:
    """The cluster idle time the cloud bills after the job: Azure ML keeps nodes for idle_time_before_scale_down."""
    return float(spec.azureml.idle_time_before_scale_down) if cloud == "azure" else None


def requirements_for(spec: JobSpec, cloud: str, instance_type: str | None) -> Requirements:
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
        idle_s=_idle_s(spec, cloud),
    )


def _describe(sku: Sku) -> str:
    rate = f" {sku.fabric_gbps:g} Gb/s" if sku.fabric_gbps else ""
    return f"{sku.size} ({sku.gpus}× {sku.gpu}, {sku.fabric}{rate}, {sku.lifecycle_text()})"


def refuse_retired(size: str, field_name: str) -> None:
    """A UserError when ``size`` is a catalog size that has been retired, naming the nearest current one."""
    sku = find(size)
    if sku is None or not sku.retired:
        return
    repl = replacement_for(sku)
    instead = _describe(repl) if repl else "none in the catalog"
    raise UserError(
        f"{field_name}: {sku.size} was retired on {sku.lifecycle_date} (source: {sku.lifecycle_source}); "
        f"nearest current replacement: {instead}",
        hint=(f"set {field_name}: {repl.size}" + (f" and resources.gpus_per_node: {repl.gpus}" if repl.gpus != sku.gpus else "")
              if repl else f"remove {field_name} and let cloudddp pick a size") + "; `cloudddp skus --explain` lists them all",
    )


def choose(spec: JobSpec, cloud: str, instance_type: str | None, *, field_name: str | None = None) -> Selection:
    """The size for ``spec`` on ``cloud``; a UserError naming the reasons when nothing fits."""
    if instance_type:
        refuse_retired(instance_type, field_name or SIZE_FIELDS.get(cloud, "instance type"))
    if spec.resources.gpus_per_node == 0:
        if instance_type:
            return Selection(requirements_for(spec, cloud, instance_type), [], None)
        raise UserError(
            "resources.gpus_per_node is 0 (CPU training): name a CPU size for this cloud",
            hint="set sagemaker.instance_type (e.g. ml.m5.xlarge) or azureml.vm_size (e.g. Standard_D4s_v3)",
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


def decide(spec: JobSpec, cloud: str, named: str | None, label: str, *, field_name: str | None = None) -> SizeDecision:
    """``choose`` plus the lines a plan shows: ``<label> <size>: why``, the warnings, the estimate."""
    selection = choose(spec, cloud, named, field_name=field_name)
    size = named or (selection.chosen.sku.size if selection.chosen else "")
    decision = SizeDecision(size, find(size) if size else None)
    if selection.chosen is not None:
        decision.decisions.append(f"{label} {size}: " + "; ".join(selection.chosen.reasons))
        decision.warnings += selection.chosen.warnings
        if selection.chosen.estimate:
            decision.estimate = selection.chosen.estimate.to_dict()
    return decision
