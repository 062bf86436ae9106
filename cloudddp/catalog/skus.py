"""The GPU size catalog: facts as data (``cloudddp/data/skus.csv``), loaded on first use.

Every row carries its sources (``cloudddp/data/SOURCES.md``); prices have a region and a date.
AWS prices are EC2 on-demand figures, a lower bound for SageMaker's ml.* prices (marked
``price_kind=ec2-proxy``), because no authoritative SageMaker training price list was at hand.
"""

from __future__ import annotations

import csv
import functools
import re
from dataclasses import dataclass
from importlib import resources

CATALOG_DATE = "2026-11-09"
"""The newest dated price in the catalog (Azure retail API via datareceipts); shown to users."""

RDMA_FABRICS = ("infiniband", "efa")


@dataclass(frozen=True)
class Sku:
    cloud: str
    size: str
    gpu: str
    gpu_model: str
    gpus: int
    gpu_mem_gb: float
    vcpus: int
    ram_gb: float
    fabric: str  # infiniband | efa | ethernet
    fabric_gbps: float | None  # per node
    intranode: str  # nvlink | pcie | single-gpu | ...
    intranode_gb_s: float
    rdma: bool | None  # None: the sources do not say
    smddp: bool
    spot: bool  # low priority (Azure) / managed spot (AWS) offered
    price_per_hour: float | None
    price_kind: str  # list | ec2-proxy | ""
    price_region: str
    price_source: str
    notes: str

    @property
    def scales_multi_node(self) -> bool:
        """An RDMA-class fabric (InfiniBand, EFA): what multi-node DDP needs to scale."""
        return self.fabric in RDMA_FABRICS

    @property
    def cuda(self) -> bool:
        return self.gpu not in ("MI300X", "Trainium") and "ROCm" not in self.gpu_model and "Trainium" not in self.gpu_model


def _opt_float(text: str) -> float | None:
    return float(text) if text.strip() else None


def _opt_bool(text: str) -> bool | None:
    return {"true": True, "false": False}.get(text.strip().lower())


@functools.cache
def all_skus() -> tuple[Sku, ...]:
    text = resources.files("cloudddp").joinpath("data/skus.csv").read_text(encoding="utf-8")
    return tuple(
        Sku(
            cloud=r["cloud"], size=r["size"], gpu=r["gpu"], gpu_model=r["gpu_model"], gpus=int(r["gpus"]),
            gpu_mem_gb=float(r["gpu_mem_gb"]), vcpus=int(r["vcpus"]), ram_gb=float(r["ram_gb"]),
            fabric=r["fabric"], fabric_gbps=_opt_float(r["fabric_gbps"]), intranode=r["intranode"],
            intranode_gb_s=float(r["intranode_gb_s"] or 0), rdma=_opt_bool(r["rdma"]),
            smddp=_opt_bool(r["smddp"]) is True, spot=_opt_bool(r["spot"]) is True,
            price_per_hour=_opt_float(r["price_per_hour"]), price_kind=r["price_kind"],
            price_region=r["price_region"], price_source=r["price_source"], notes=r["notes"],
        )
        for r in csv.DictReader(text.splitlines())
    )


def skus(cloud: str) -> list[Sku]:
    return [s for s in all_skus() if s.cloud == cloud]


def find(size: str) -> Sku | None:
    """The catalog row for ``size`` (case-insensitive), on either cloud."""
    key = size.lower()
    return next((s for s in all_skus() if s.size.lower() == key), None)


_AZURE_SIZE = re.compile(r"^Standard_([A-Z]+)(\d+)([a-z]*)(?:_(.*))?$")


def azure_rdma_by_name(size: str) -> tuple[bool, str]:
    """Azure's naming rule: an 'r' among the size's feature letters marks RDMA (InfiniBand) capability.

    The catalog is consulted first (it holds the exceptions); this rule answers for sizes it lacks.
    """
    sku = find(size)
    if sku is not None:
        return sku.scales_multi_node, f"{size}: {sku.fabric} per the catalog ({CATALOG_DATE})"
    m = _AZURE_SIZE.match(size)
    if not m:
        return False, f"{size} is not an Azure size name (Standard_<family><vCPUs><features>[_version])"
    has_r = "r" in m.group(3)
    return has_r, f"{size}: {'an' if has_r else 'no'} 'r' in its feature letters ('{m.group(3)}'), Azure's RDMA naming rule"


def azure_ib_alternative(size: str) -> str | None:
    """The RDMA sibling of an Azure size: Standard_NC24s_v3 → Standard_NC24rs_v3, when the catalog has it."""
    m = _AZURE_SIZE.match(size)
    if not m or "r" in m.group(3):
        return None
    letters = m.group(3)
    cands = [f"Standard_{m.group(1)}{m.group(2)}{letters[:i]}r{letters[i:]}" + (f"_{m.group(4)}" if m.group(4) else "")
             for i in range(len(letters) + 1)]
    for cand in cands:
        sku = find(cand)
        if sku is not None and sku.scales_multi_node:
            return sku.size
    return None
