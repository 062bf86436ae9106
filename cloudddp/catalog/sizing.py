"""From a job spec to a size on a cloud: the catalog's selection, fed with what the spec says.

The workload for the cost model comes from the shared training script's arguments (``--model``,
``--dataset``, ``--epochs``, ``--batch-size``) and the spec's checkpoint settings — only when the entry
script *is* the shared script, which carries a marker line (:data:`cloudddp.spec.model.SHARED_SCRIPT_MARKER`).
For any other script the model cannot know the speed, so the estimate says so and asks for the figures it needs:
``resources.step_time`` (seconds per optimizer step, measured) and ``resources.steps`` (steps of the whole
job). A step time measured on a finished run of the same job on the same size (:mod:`cloudddp.catalog.stepstore`)
replaces the model's (or the given) figure on that size, and the plan says so.

A backend says where its sizes come from with a :class:`SizeTarget` (the catalog's cloud, the size the
spec names and in which field, the idle time its cloud bills after a job); nothing here knows a particular
backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

from cloudddp.catalog import (
    Requirements,
    Selection,
    Sku,
    StepTime,
    Workload,
    find,
    replacement_for,
    select,
    workload_for_model,
)
from cloudddp.catalog.model import DATASET_BYTES, DATASET_SAMPLES
from cloudddp.catalog.select import Candidate
from cloudddp.catalog.stepstore import Measured, StepStore
from cloudddp.catalog.target import SizeTarget
from cloudddp.errors import UserError
from cloudddp.plan import Estimate
from cloudddp.spec.model import JobSpec, is_shared_script, job_key

GIVEN_STEP_BASIS = (
    "resources.step_time, applied as given on every size (the model does not know this "
    "script: neither another GPU's speed nor the all-reduce across GPUs is accounted for)"
)


def script_arg(args: list[str], name: str) -> str | None:
    """The value of ``--name value`` or ``--name=value`` in a script's argument list."""
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


class WorkloadFinding(NamedTuple):
    """The workload the cost model gets for a spec, what it is based on, and what is missing for an estimate. A named
    tuple: cheaper to define than a frozen dataclass (~1 ms of every render)."""

    workload: Workload
    basis: str
    missing: str = ""
    """What to give for a cost estimate; empty when the workload has what the model needs."""


def _epochs(spec: JobSpec) -> int | None:
    value = script_arg(spec.code.args, "--epochs")
    return int(value) if value and value.isdigit() else None


ASK = (
    "give resources.step_time (seconds per optimizer step, measured: e.g. one process on one GPU here) and "
    "resources.steps (optimizer steps of the whole job); or run it once: the step time measured on a finished "
    "run of this job is used on the same size"
)


def find_workload(spec: JobSpec) -> WorkloadFinding:
    """The workload for the cost model: the shared script's arguments, else the figures the spec gives."""
    r = spec.resources
    given = StepTime(r.step_time, GIVEN_STEP_BASIS) if r.step_time else None
    unknown_network = ""
    if is_shared_script(spec):
        args = spec.code.args
        model = script_arg(args, "--model") or "cnn"
        dataset = script_arg(args, "--dataset") or "digits"
        try:
            epochs = int(script_arg(args, "--epochs") or 10)
            batch = int(script_arg(args, "--batch-size") or 64)
        except ValueError:
            epochs = batch = 0
        every = spec.checkpoint.every_epochs if spec.checkpoint.enabled else 0
        found = (
            workload_for_model(
                model,
                DATASET_SAMPLES[dataset],
                epochs,
                batch,
                dataset_bytes=DATASET_BYTES[dataset],
                checkpoint_every=every,
            )
            if dataset in DATASET_SAMPLES and epochs > 0 and batch > 0
            else None
        )
        if found is not None:
            basis = f"the shared script's arguments: {model} on {dataset}, {epochs} epochs, batch {batch} per process"
            return WorkloadFinding(replace(found, step_time=given, steps=r.steps), basis)
        unknown_network = (
            f"the shared script with --model {model} --dataset {dataset}: a network or data set "
            "the cost model does not know"
        )
    what = unknown_network or (
        f"code.entry {spec.code.entry} is not cloudddp's shared training script"
        if spec.code.entry
        else "code.command runs a program cloudddp does not know"
    )
    workload = Workload(
        params=0,
        flops_per_sample=0.0,
        samples_per_epoch=0,
        epochs=_epochs(spec) or 0,
        per_gpu_batch=0,
        steps=r.steps,
        step_time=given,
    )
    if given and r.steps:
        return WorkloadFinding(workload, f"{what}: resources.step_time × resources.steps")
    missing = f"{what}, so its speed cannot be modelled: " + (
        "give resources.steps (optimizer steps of the whole job) too" if given else ASK
    )
    return WorkloadFinding(workload, what, missing)


def measured_step_times(spec: JobSpec) -> dict[str, Measured]:
    """Step times measured on finished runs of this job at the spec's shape, by size (lower case)."""
    r = spec.resources
    return StepStore().for_shape(job_key(spec), r.nodes, r.processes)


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
        workload=find_workload(spec).workload,
        idle_s=target.idle_s,
        region=target.region,
        step_times={size: m.step_time(_epochs(spec)) for size, m in measured_step_times(spec).items()},
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
        reasons = [f"{c.sku.size}: {'; '.join(c.reasons)}" for c in selection.candidates[:6]] or [
            f"no {target.cloud} size in the catalog matches resources.* (a refusal always says why)"
        ]
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
    estimate: Estimate | None = None


def priced(chosen: Candidate, region: str | None = None) -> Estimate | None:
    """What the plan says ``chosen`` costs: the cost model's estimate with the size it prices, or for a script whose
    speed the model cannot know, the size's price alone; None for a size without a dated price. A price from another
    region than ``region`` (the job's; None: the cloud's reference region) names its own."""
    price = chosen.sku.price_per_hour * chosen.nodes if chosen.sku.price_per_hour is not None else None
    size, nodes, kind = chosen.sku.size, chosen.nodes, chosen.sku.price_kind
    where = chosen.sku.price_region if chosen.row(region)["price_elsewhere"] else None
    if chosen.estimate is not None:
        return replace(chosen.estimate, size=size, nodes=nodes, price_kind=kind, price_region=where).rounded()
    if price is None:
        return None
    return Estimate(price_per_hour=price, size=size, nodes=nodes, price_kind=kind, price_region=where)


def decide(spec: JobSpec, target: SizeTarget, label: str) -> SizeDecision:
    """``choose`` plus the lines a plan shows: ``<label> <size>: why``, the warnings, the estimate."""
    selection = choose(spec, target)
    size = target.named or (selection.chosen.sku.size if selection.chosen else "")
    decision = SizeDecision(size, find(size) if size else None)
    chosen = selection.chosen
    if chosen is not None:
        decision.decisions.append(f"{label} {size}: " + "; ".join(chosen.reasons))
        decision.warnings += chosen.warnings
        decision.estimate = priced(chosen, target.region)
    if spec.resources.gpus_per_node == 0:
        return decision
    finding = find_workload(spec)
    if chosen is not None and chosen.estimate is not None:
        est = chosen.estimate
        if est.step_basis != "model":
            decision.decisions.append(
                f"cost estimate: step time {est.step_s:.4g} s from {est.step_basis}, {est.steps:,.0f} steps"
            )
        else:
            decision.decisions.append(f"cost estimate: the model's step time {est.step_s:.4g} s, from {finding.basis}")
    elif finding.missing:
        decision.warnings.append(f"cost: no estimate: {finding.missing}")
    return decision
