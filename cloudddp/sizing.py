"""From a job spec to a size on a cloud: the catalog's selection, fed with what the spec says.

The workload for the cost model comes from the shared training script's arguments when they are
there (``--model``, ``--dataset``, ``--epochs``, ``--batch-size``) and the spec's checkpoint settings;
otherwise cost and efficiency are shown as unknown rather than guessed. A backend says where its sizes
come from with a :class:`SizeTarget` (the catalog's cloud, the size the spec names and in which field, the
idle time its cloud bills after a job); nothing here knows a particular backend.
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


@dataclass(frozen=True)
class SizeTarget:
    """Where a backend's sizes come from, and what the spec says about them."""

    cloud: str
    """A cloud of the catalog ("azure", "aws"); the catalog checks it."""
    named: str | None
    """The size the spec names, if any."""
    field: str
    """The spec field that names it, for messages (e.g. ``azureml.vm_size``)."""
    idle_s: float | None = None
    """Time the cloud bills after the job ends (an autoscaling cluster's scale-down delay)."""


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
    return workload_for_model(
        model, DATASET_SAMPLES[dataset], epochs, batch, dataset_bytes=DATASET_BYTES[dataset], checkpoint_every=every
    )


def requirements_for(spec: JobSpec, target: SizeTarget) -> Requirements:
    r = spec.resources
    return Requirements(
        cloud=target.cloud,
        nodes=r.nodes,
        gpus_per_node=r.gpus_per_node,
        accelerator=r.accelerator,
        min_gpu_memory_gb=r.min_gpu_memory_gb,
        interconnect=r.interconnect,
        spot=r.spot,
        smddp=spec.distribution.backend == "smddp",
        max_price_per_hour=r.max_price_per_hour,
        instance_type=target.named,
        workload=workload_for_spec(spec),
        idle_s=target.idle_s,
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
        hint=(
            f"set {field_name}: {repl.size}"
            + (f" and resources.gpus_per_node: {repl.gpus}" if repl.gpus != sku.gpus else "")
            if repl
            else f"remove {field_name} and let cloudddp pick a size"
        )
        + "; `cloudddp skus --explain` lists them all",
    )


def choose(spec: JobSpec, target: SizeTarget) -> Selection:
    """The size for ``spec`` at ``target``; a UserError naming the reasons when nothing fits."""
    if target.named:
        refuse_retired(target.named, target.field)
    if spec.resources.gpus_per_node == 0:
        if target.named:
            return Selection(requirements_for(spec, target), [], None)
        raise UserError(
            "resources.gpus_per_node is 0 (CPU training): name a CPU size for this cloud",
            hint=f"set {target.field} to a CPU size",
        )
    selection = select(requirements_for(spec, target))
    if selection.chosen is None:
        reasons = [f"{c.sku.size}: {'; '.join(c.reasons)}" for c in selection.candidates[:6]]
        what = f"{target.named} cannot run this job" if target.named else "no size in the catalog fits this job"
        raise UserError(
            what + ":\n    " + "\n    ".join(reasons),
            hint="`cloudddp skus --explain` lists every size with its verdict; relax resources.* or name a size",
        )
    return selection


@dataclass
class SizeDecision:
    """The size a cloud render uses, with what to tell the user about it."""

    size: str
    sku: Sku | None
    decisions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    estimate: dict[str, Any] | None = None


def decide(spec: JobSpec, target: SizeTarget, label: str) -> SizeDecision:
    """``choose`` plus the lines a plan shows: ``<label> <size>: why``, the warnings, the estimate."""
    selection = choose(spec, target)
    size = target.named or (selection.chosen.sku.size if selection.chosen else "")
    decision = SizeDecision(size, find(size) if size else None)
    if selection.chosen is not None:
        decision.decisions.append(f"{label} {size}: " + "; ".join(selection.chosen.reasons))
        decision.warnings += selection.chosen.warnings
        if selection.chosen.estimate:
            decision.estimate = selection.chosen.estimate.to_dict()
    return decision
