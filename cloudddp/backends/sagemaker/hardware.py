"""Instance types named in ``sagemaker.instance_type`` that cloudddp's catalog has no row for.

The catalog (``cloudddp/data/skus.csv``) holds a size only with a dated price and its hardware from a source, so
many valid training types (``ml.p5.4xlarge``, ``ml.p6-b200.48xlarge``, ``ml.g7e.*``, the smaller g5/g6 sizes)
have no row. Such a type is still accepted by name when it can run the job: its accelerators come from
``cloudddp/data/sagemaker_instance_hardware.json`` (EC2's DescribeInstanceTypes as moto bundles it; a test holds
the file equal to the installed moto's copy), and a refusal always names what does not fit. Without a row there is
no price, so no estimate and no ranking.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass

from cloudddp.catalog.sizing import SizeDecision
from cloudddp.errors import UserError
from cloudddp.paths import data_text
from cloudddp.spec.model import JobSpec

HARDWARE_FILE = "sagemaker_instance_hardware.json"


@dataclass(frozen=True)
class Hardware:
    """An instance type's accelerators as EC2 describes them."""

    gpus: int
    gpu: str
    gpu_mem_gb: float
    neuron: int
    """Trainium/Inferentia devices (not CUDA GPUs)."""
    efa: bool


@functools.cache
def hardware() -> dict[str, Hardware]:
    """Every SageMaker training type EC2 still describes, by its SageMaker name."""
    text = data_text(HARDWARE_FILE)
    return {
        name: Hardware(
            gpus=row["gpus"],
            gpu=row.get("gpu", ""),
            gpu_mem_gb=round(row.get("gpu_mem_mib", 0) / 1024, 1),
            neuron=row.get("neuron", 0),
            efa=row["efa"],
        )
        for name, row in json.loads(text)["types"].items()
    }


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def _refusals(spec: JobSpec, hw: Hardware) -> list[str]:
    """Why a type with ``hw`` cannot run ``spec`` (none: it can)."""
    r, reasons = spec.resources, []
    if hw.neuron:
        return [f"its {hw.neuron} accelerators are AWS Neuron devices, not CUDA GPUs (the job needs CUDA)"]
    if hw.gpus == 0:
        return [f"it has no GPU; the job asks for {r.gpus_per_node} per node (resources.gpus_per_node)"]
    if r.processes > hw.gpus:
        reasons.append(f"it has {hw.gpus} {hw.gpu} GPU(s); the job asks for {r.processes} per node")
    if r.accelerator and not _words(r.accelerator) <= _words(hw.gpu):
        reasons.append(f"its GPU is {hw.gpu}; the job asks for {r.accelerator} (resources.accelerator)")
    if r.min_gpu_memory_gb and hw.gpu_mem_gb < r.min_gpu_memory_gb:
        reasons.append(f"{hw.gpu_mem_gb:g} GB per GPU; the job needs {r.min_gpu_memory_gb:g}")
    if spec.distribution.backend == "smddp":
        reasons.append("smddp runs only on the types the catalog marks for it (`cloudddp skus --backend sagemaker`)")
    if not hw.efa and r.interconnect == "rdma":
        reasons.append("no EFA, and the job asks for an RDMA interconnect (resources.interconnect: rdma)")
    return reasons


def _warnings(spec: JobSpec, name: str, hw: Hardware) -> list[str]:
    r, warnings = spec.resources, []
    if r.processes < hw.gpus:
        warnings.append(f"{r.processes} processes per node leave {hw.gpus - r.processes} of its {hw.gpus} GPUs idle")
    if r.nodes > 1 and not hw.efa and r.interconnect == "auto":
        warnings.append(f"{name} has no EFA: multi-node DDP over Ethernet does not scale")
    return warnings


def uncatalogued(spec: JobSpec, name: str) -> SizeDecision:
    """The size decision for a valid type without a catalog row; a UserError (exit 2) with every reason it
    cannot run the job."""
    hw = hardware().get(name)
    if hw is None:
        return SizeDecision(
            name,
            None,
            [f"instance type {name}: named in the spec; not in cloudddp's catalog"],
            [
                f"{name}: EC2's instance data (cloudddp/data/{HARDWARE_FILE}) does not describe it, so its GPUs "
                "are not checked against resources.*; no cost estimate"
            ],
        )
    reasons = _refusals(spec, hw)
    if reasons:
        raise UserError(
            f"sagemaker.instance_type: {name} cannot run this job: " + "; ".join(reasons),
            hint="`cloudddp skus --backend sagemaker --explain` lists the catalog's types with their verdicts; "
            "change resources.* or name another type",
        )
    what = f"{hw.gpus}× {hw.gpu} {hw.gpu_mem_gb:g} GB" + (", EFA" if hw.efa else "")
    return SizeDecision(
        name,
        None,
        [f"instance type {name}: named in the spec ({what}, from EC2's instance data); not in cloudddp's catalog"],
        [*_warnings(spec, name, hw), f"{name}: no price in cloudddp's catalog, so no cost estimate"],
    )
