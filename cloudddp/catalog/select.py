"""Choosing a size for a job, or checking the one it names, with a reason for every verdict.

Candidates are every catalog size of the target cloud whose GPU count fits the job (nodes × GPUs per
node, or a total the size's GPU count divides). Each is rejected with a reason, or accepted and
ranked by the estimated cost of the whole job — start-up, training, checkpoints, shutdown and idle
nodes, each at the size's price (model.py, overheads.py) — not by price per hour. A size without a
dated price in the catalog is never chosen automatically (its cost cannot be compared, so calling
another size "the cheapest" would be a guess): it is rejected with that reason, and a spec may still
name it. More than one node requires an RDMA fabric (InfiniBand/EFA) unless the
spec says ``interconnect: any``. A retired size is never picked; one retiring within
``RETIRING_WARN_DAYS`` of the catalog date is picked only with a warning.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from cloudddp.catalog.model import StepTime, Workload, estimate
from cloudddp.catalog.overheads import overheads
from cloudddp.catalog.skus import CATALOG_DATE, RETIRING_WARN_DAYS, Sku, azure_ib_alternative, check_cloud, find, skus
from cloudddp.catalog.speed import gpu_key, speed, speed_basis
from cloudddp.plan import Estimate

UNPRICED = (
    "no dated on-demand price in the catalog: not chosen automatically, since its cost cannot be compared "
    "(name it in the spec to use it anyway)"
)
CLOUD_REGIONS = {"aws": "us-east-1", "azure": "eastus"}
"""The region each cloud's prices are read in (cloudddp/data/SOURCES.md); a row priced elsewhere says its own."""
SMDDP_SOURCE = "SM_DATAPARALLEL_SUPPORTED_INSTANCE_TYPES in the SageMaker Python SDK (sagemaker/core/fw_utils.py)"


@dataclass(frozen=True)
class Requirements:
    """What a job asks of a size on one cloud: its shape, the GPU, the fabric, spot, smddp, a price cap, a size
    it names, and what the cost model needs to rank the sizes."""

    cloud: str  # one of skus.clouds()
    nodes: int | None = None
    gpus_per_node: int | None = None
    total_gpus: int | None = None
    accelerator: str | None = None
    min_gpu_memory_gb: float | None = None
    interconnect: Literal["auto", "rdma", "any"] = "auto"
    spot: bool = False
    smddp: bool = False
    max_price_per_hour: float | None = None
    instance_type: str | None = None
    workload: Workload | None = None
    idle_s: float | None = None  # the cluster's idle time before scale-down, where the cloud bills it (Azure ML)
    region: str | None = None  # where the job runs; None: the cloud's reference region (CLOUD_REGIONS)
    step_times: Mapping[str, StepTime] = field(default_factory=dict)
    """Step times measured for this job's shape, by size name (lower case): they replace the model on that size."""


@dataclass
class Candidate:
    """One size considered for a job, on so many nodes: whether it qualifies (and why not), and its estimate."""

    sku: Sku
    nodes: int
    gpus_per_node: int
    ok: bool = True
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    estimate: Estimate | None = None

    def reject(self, reason: str) -> None:
        self.ok = False
        self.reasons.append(reason)

    def row(self, region: str | None = None) -> dict[str, Any]:
        """The candidate as a table row; ``price_elsewhere`` when its price is from another region than
        ``region`` (the job's, else the cloud's reference region)."""
        e = self.estimate
        price = e.price_per_hour if e else (self.sku.price_per_hour * self.nodes if self.sku.price_per_hour else None)
        key = gpu_key(self.sku.gpu, self.sku.gpu_model)
        return {
            "size": self.sku.size,
            "nodes": self.nodes,
            "gpus": f"{self.nodes}×{self.sku.gpus} {self.sku.gpu}",
            "gpu_memory_gb": self.sku.gpu_mem_gb,
            "fabric": _fabric(self.sku),
            "price_per_hour": price,
            "price_kind": self.sku.price_kind,
            "price_date": self.sku.price_date,
            "price_region": self.sku.price_region,
            "price_elsewhere": price is not None and _elsewhere(self.sku, region),
            "lifecycle": self.sku.lifecycle_text(),
            "total_cost": e.total_cost if e else None,
            "efficiency": e.efficiency if e else None,
            "breakdown": {part: {"s": round(s, 3), "cost": c} for part, (s, c) in e.breakdown().items()} if e else None,
            "job_s": e.job_s if e else None,
            "speed_vs_a100": speed(key),
            "speed_basis": speed_basis(key),
            "ok": self.ok,
            "why": "; ".join(self.reasons),
            "warnings": self.warnings,
        }


def _elsewhere(sku: Sku, region: str | None) -> bool:
    """Whether ``sku``'s price is from another region than the job's (else the cloud's reference region)."""
    where = region or CLOUD_REGIONS.get(sku.cloud)
    return where is not None and sku.price_region != where


def _fabric(sku: Sku) -> str:
    rate = f" {sku.fabric_gbps:g} Gb/s" if sku.fabric_gbps else ""
    return f"{sku.fabric}{rate}"


@dataclass
class Selection:
    """Every size considered for a job, and the one chosen (None: none qualifies)."""

    requirements: Requirements
    candidates: list[Candidate]
    chosen: Candidate | None
    catalog_date: str = CATALOG_DATE

    @property
    def warnings(self) -> list[str]:
        return self.chosen.warnings if self.chosen else []

    def explain(self) -> list[dict[str, Any]]:
        return [c.row(self.requirements.region) for c in self.candidates]

    def to_dict(self) -> dict[str, Any]:
        return {
            "catalog_date": self.catalog_date,
            "chosen": self.chosen.row(self.requirements.region)
            | {"estimate": self.chosen.estimate.to_dict() if self.chosen.estimate else None}
            if self.chosen
            else None,
            "candidates": self.explain(),
        }


def smddp_types() -> list[str]:
    return sorted(s.size for s in skus("aws") if s.smddp and not s.retired)


def _shapes(req: Requirements, sku: Sku) -> tuple[int, int] | str:
    """(nodes, GPUs per node) for this size, or why it cannot hold the job."""
    if req.gpus_per_node is not None and req.nodes is not None:
        if req.gpus_per_node > sku.gpus:
            return f"{sku.gpus} GPUs per node, the job needs {req.gpus_per_node}" + (
                ' (more processes than GPUs fail with "Duplicate GPU detected" on Azure ML)'
                if req.cloud == "azure"
                else ""
            )
        return req.nodes, req.gpus_per_node
    total = req.total_gpus or (req.nodes or 1) * (req.gpus_per_node or sku.gpus)
    if total % sku.gpus:
        return f"{sku.gpus} GPUs per node do not divide the job's {total} GPUs"
    return total // sku.gpus, sku.gpus


def _judge(req: Requirements, sku: Sku, named: bool) -> Candidate:
    shape = _shapes(req, sku)
    if isinstance(shape, str):  # shown as the size whole, on the nodes the job would need of it
        total = req.total_gpus or (req.nodes or 1) * (req.gpus_per_node or sku.gpus)
        cand = Candidate(sku, req.nodes or max(1, -(-total // sku.gpus)), sku.gpus)
        _judge_lifecycle(cand)
        cand.reject(shape)
        return cand
    nodes, per_node = shape
    cand = Candidate(sku, nodes, per_node)
    _judge_lifecycle(cand)
    if not sku.cuda:
        cand.reject(f"{sku.gpu_model}: not a CUDA GPU (the shared script uses NCCL/CUDA)")
    if req.accelerator and not gpu_matches(req.accelerator, sku):
        cand.reject(f"GPU is {sku.gpu}, the job asks for {req.accelerator}")
    if req.min_gpu_memory_gb and sku.gpu_mem_gb < req.min_gpu_memory_gb:
        cand.reject(f"{sku.gpu_mem_gb:g} GB per GPU, the job needs {req.min_gpu_memory_gb:g}")
    if per_node < sku.gpus:
        msg = f"{per_node} processes per node leave {sku.gpus - per_node} of its {sku.gpus} GPUs idle"
        (cand.warnings if named else cand.reasons).append(msg)
        if not named:
            cand.ok = False
    needs_rdma = req.interconnect == "rdma" or (req.interconnect == "auto" and nodes > 1)
    if needs_rdma and not sku.scales_multi_node:
        why = (
            f"no InfiniBand/EFA ({sku.fabric}): multi-node DDP over Ethernet does not scale"
            if nodes > 1
            else f"no InfiniBand/EFA ({sku.fabric}), and the job asks for an RDMA interconnect"
        )
        if named and req.interconnect == "auto":
            cand.warnings.append(why)
        else:
            cand.reject(why)
    if req.smddp and not sku.smddp:
        cand.reject(f"smddp does not run on {sku.size} (supported: {', '.join(smddp_types())}; source: {SMDDP_SOURCE})")
    if req.smddp and sku.smddp and per_node != sku.gpus:
        cand.reject(f"smddp needs one process per GPU on all {sku.gpus} GPUs of {sku.size}")
    if req.spot and not sku.spot:
        cand.reject(f"{sku.size} is not offered as spot/low priority (per the catalog)")
    relative = speed(gpu_key(sku.gpu, sku.gpu_model)) if sku.cuda else None
    if req.workload and sku.cuda:
        costs = overheads(sku.cloud)
        a100 = req.workload.a100_images_per_s
        cand.estimate = estimate(
            req.workload,
            gpus_per_node=per_node,
            nodes=nodes,
            images_per_s_per_gpu=a100 * relative if a100 and relative else None,
            intranode_gb_s=sku.intranode_gb_s,
            fabric=sku.fabric,
            fabric_gbps=sku.fabric_gbps,
            price_per_node_hour=sku.price_per_hour,
            overheads=costs.with_idle(req.idle_s) if costs else None,
            step_time=req.step_times.get(sku.size.lower()),
        )
    price = sku.price_per_hour * nodes if sku.price_per_hour is not None else None
    if req.max_price_per_hour and price is not None and price > req.max_price_per_hour:
        cand.reject(f"${price:.2f}/h for {nodes} node(s) is over the ceiling of ${req.max_price_per_hour:.2f}/h")
    if price is None and not named:
        cand.reject(UNPRICED)
    elif price is None:
        cand.warnings.append(f"{sku.size} has no dated price in the catalog: the cost of this job is unknown")
    if cand.ok and not cand.reasons:
        cand.reasons.append("fits")
    return cand


def _judge_lifecycle(cand: Candidate) -> None:
    """Retired sizes are rejected; one retiring soon is kept with a warning."""
    sku = cand.sku
    state = sku.status()
    if state == "retired":
        cand.reject(f"retired on {sku.lifecycle_date} ({sku.lifecycle_source})")
    elif state == "retiring":
        left = sku.days_left()
        if left is not None and left <= RETIRING_WARN_DAYS:
            cand.warnings.append(
                f"{sku.size} retires on {sku.lifecycle_date}, {left} days after the catalog date "
                f"{CATALOG_DATE} ({sku.lifecycle_source})"
            )


def _rank_key(c: Candidate) -> tuple[int, int, int, float]:
    """Fitting sizes first; among them the whole-job cost, then sizes priced but not estimated (then unpriced
    ones, which only a spec naming them keeps fitting)."""
    cost = c.estimate.total_cost if c.estimate else None
    price = c.sku.price_per_hour * c.nodes if c.sku.price_per_hour is not None else None
    return (
        0 if c.ok else 1,
        price is None,
        cost is None,
        cost if cost is not None else (price if price is not None else 0.0),
    )


def _alternatives(req: Requirements, named: Candidate, others: list[Candidate]) -> list[str]:
    """What to pick instead of a named size that does not suit the job: same GPU with RDMA, or one node."""
    sku, total = named.sku, named.nodes * named.gpus_per_node
    tips = []
    rdma = sorted(
        (s for s in skus(sku.cloud) if s.gpu == sku.gpu and s.scales_multi_node and not s.retired),
        key=lambda s: s.price_per_hour if s.price_per_hour is not None else float("inf"),
    )
    sibling = azure_ib_alternative(sku.size) if sku.cloud == "azure" else None
    names = list(dict.fromkeys(([sibling] if sibling else []) + [s.size for s in rdma]))[:3]
    if names and named.nodes > 1:
        tips.append(f"with InfiniBand/EFA and the same {sku.gpu} GPUs: {', '.join(names)}")
    one_node = [
        s for s in skus(sku.cloud) if s.gpu == sku.gpu and s.gpus >= total and s.size != sku.size and not s.retired
    ]
    if named.nodes > 1 and one_node:
        best = min(one_node, key=lambda s: (s.gpus, s.price_per_hour or float("inf")))
        tips.append(f"or all {total} GPUs on one node, no fabric needed: {best.size} ({best.gpus}× {best.gpu})")
    if not tips:
        fits = [c.sku.size for c in others if c.ok][:3]
        if fits:
            tips.append(f"sizes that would qualify: {', '.join(fits)}")
    return tips


def select(req: Requirements) -> Selection:
    """Choose a size (or check ``req.instance_type``); every candidate keeps its verdict and reasons."""
    check_cloud(req.cloud)
    if req.instance_type:
        sku = find(req.instance_type)
        others = [_judge(req, s, named=False) for s in skus(req.cloud) if sku is None or s.size != sku.size]
        others.sort(key=_rank_key)
        if sku is None:
            return Selection(req, others, None)
        named = _judge(req, sku, named=True)
        if named.ok:
            named.reasons = [r for r in named.reasons if r != "fits"] or ["named in the spec"]
        if named.warnings:
            named.warnings += _alternatives(req, named, others)
        return Selection(req, [named, *others], named if named.ok else None)
    cands = sorted((_judge(req, s, named=False) for s in skus(req.cloud)), key=_rank_key)
    chosen = cands[0] if cands and cands[0].ok else None
    if chosen is not None:
        why = (
            "lowest estimated cost of the whole job"
            if chosen.estimate and chosen.estimate.total_cost is not None
            else "lowest price per hour among the priced sizes that fit"
        )
        chosen.reasons = [why] + [r for r in chosen.reasons if r != "fits"]
    return Selection(req, cands, chosen)


def gpu_matches(asked: str, sku: Sku) -> bool:
    """``resources.accelerator`` names this size's GPU: each of its words is a word of the GPU's name or model
    (``A100``, ``A100 80GB``, ``H100 SXM``), so ``A10`` is not an ``A100``."""
    words = set(re.findall(r"[a-z0-9]+", f"{sku.gpu} {sku.gpu_model}".lower()))
    return set(re.findall(r"[a-z0-9]+", asked.lower())) <= words
