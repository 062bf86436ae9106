"""The GPU size catalog: facts as data (``cloudddp/data/skus.csv``), loaded on first use.

Every row carries its sources (``cloudddp/data/SOURCES.md``): prices have a region, a source and a date,
and every size has a lifecycle (on sale / retiring on a date / retired on a date) with the source that
says so. AWS prices are EC2 on-demand figures, a lower bound for SageMaker's ml.* prices (marked
``price_kind=ec2-proxy``), because no authoritative SageMaker training price list was at hand.
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import re
from dataclasses import dataclass

from cloudddp.catalog.model import peak_tflops
from cloudddp.errors import UserError
from cloudddp.paths import data_text

CATALOG_DATE = "2026-11-09"
"""The newest dated price in the catalog (Azure retail API via datareceipts); lifecycles are judged on it."""

RDMA_FABRICS = ("infiniband", "efa")
LIFECYCLES = ("on-sale", "retiring", "retired")
RETIRING_WARN_DAYS = 90
"""A size retiring within this many days of the catalog date is still picked, with a warning."""


@dataclass(frozen=True)
class Sku:
    """One size of the dated catalog (``skus.csv``): its GPUs, fabric, price and lifecycle, each with its source."""

    cloud: str
    size: str
    family: str  # the provider's series, split where its docs split it by RDMA ('r' sizes, EFA sizes)
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
    price_date: str
    price_source: str
    lifecycle: str  # on-sale | retiring | retired
    lifecycle_date: str  # ISO date for retiring/retired, "" when on sale
    lifecycle_source: str
    notes: str

    @property
    def scales_multi_node(self) -> bool:
        """An RDMA-class fabric (InfiniBand, EFA): what multi-node DDP needs to scale."""
        return self.fabric in RDMA_FABRICS

    @property
    def cuda(self) -> bool:
        return (
            self.gpu not in ("MI300X", "Trainium") and "ROCm" not in self.gpu_model and "Trainium" not in self.gpu_model
        )

    def status(self, on: str = CATALOG_DATE) -> str:
        """The lifecycle on a date: a 'retiring' size whose date has passed is 'retired'."""
        if self.lifecycle == "on-sale" or not self.lifecycle_date:
            return self.lifecycle
        return "retired" if self.lifecycle_date <= on else "retiring"

    @property
    def retired(self) -> bool:
        return self.status() == "retired"

    def days_left(self, on: str = CATALOG_DATE) -> int | None:
        """Days from ``on`` to the retirement date, for a size announced for retirement."""
        if not self.lifecycle_date:
            return None
        return (dt.date.fromisoformat(self.lifecycle_date) - dt.date.fromisoformat(on)).days

    def lifecycle_text(self) -> str:
        state = self.status()
        if state == "on-sale":
            return f"on sale as of {CATALOG_DATE}"
        return f"{'retired on' if state == 'retired' else 'retiring on'} {self.lifecycle_date}"


def _opt_float(text: str) -> float | None:
    return float(text) if text.strip() else None


def _opt_bool(text: str) -> bool | None:
    return {"true": True, "false": False}.get(text.strip().lower())


@functools.cache
def all_skus() -> tuple[Sku, ...]:
    text = data_text("skus.csv")
    return tuple(
        Sku(
            cloud=r["cloud"],
            size=r["size"],
            family=r["family"],
            gpu=r["gpu"],
            gpu_model=r["gpu_model"],
            gpus=int(r["gpus"]),
            gpu_mem_gb=float(r["gpu_mem_gb"]),
            vcpus=int(r["vcpus"]),
            ram_gb=float(r["ram_gb"]),
            fabric=r["fabric"],
            fabric_gbps=_opt_float(r["fabric_gbps"]),
            intranode=r["intranode"],
            intranode_gb_s=float(r["intranode_gb_s"] or 0),
            rdma=_opt_bool(r["rdma"]),
            smddp=_opt_bool(r["smddp"]) is True,
            spot=_opt_bool(r["spot"]) is True,
            price_per_hour=_opt_float(r["price_per_hour"]),
            price_kind=r["price_kind"],
            price_region=r["price_region"],
            price_date=r["price_date"],
            price_source=r["price_source"],
            lifecycle=r["lifecycle"],
            lifecycle_date=r["lifecycle_date"],
            lifecycle_source=r["lifecycle_source"],
            notes=r["notes"],
        )
        for r in csv.DictReader(text.splitlines())
    )


def clouds() -> list[str]:
    """The clouds the catalog has sizes for."""
    return sorted({s.cloud for s in all_skus()})


def check_cloud(cloud: str) -> str:
    """``cloud`` if the catalog knows it; a UserError listing the clouds it knows otherwise."""
    if cloud not in clouds():
        raise UserError(
            f"cloud {cloud!r} has no sizes in the GPU catalog (clouds: {', '.join(clouds())})",
            hint="backends declare the cloud their sizes come from; use one of these or None",
        )
    return cloud


def skus(cloud: str) -> list[Sku]:
    return [s for s in all_skus() if s.cloud == cloud]


def find(size: str) -> Sku | None:
    """The catalog row for ``size`` (case-insensitive), on either cloud."""
    key = size.lower()
    return next((s for s in all_skus() if s.size.lower() == key), None)


def newest_first(sku: Sku) -> tuple[float, float]:
    """Sort key putting the newest GPU first: highest dense fp16/bf16 peak, then most GPU memory.

    A generation proxy from cited data (gpu_peaks.csv) rather than a table of launch dates.
    """
    return -(peak_tflops(sku.gpu) or 0.0), -sku.gpu_mem_gb


def replacement_for(sku: Sku) -> Sku | None:
    """The nearest current size to a retired one: same cloud, a fabric at least as able to scale, CUDA, the same
    GPU count if any (else the nearest count), newest GPU; priced sizes before unpriced ones."""
    current = [
        s for s in skus(sku.cloud) if not s.retired and s.cuda and (s.scales_multi_node or not sku.scales_multi_node)
    ]
    if not current:
        return None
    return min(
        current,
        key=lambda s: (
            abs(s.gpus - sku.gpus),
            s.gpus < sku.gpus,
            *newest_first(s),
            s.price_per_hour is None,
            s.price_per_hour or 0.0,
        ),
    )


_AZURE_SIZE = re.compile(r"^Standard_([A-Z]+)(\d+)([a-z]*)(?:_(.*))?\Z")


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
    return (
        has_r,
        f"{size}: {'an' if has_r else 'no'} 'r' in its feature letters ('{m.group(3)}'), Azure's RDMA naming rule",
    )


def azure_ib_alternative(size: str) -> str | None:
    """The current RDMA sibling of an Azure size (Standard_NC24s_v3 → Standard_NC24rs_v3 while it was on sale)."""
    m = _AZURE_SIZE.match(size)
    if not m or "r" in m.group(3):
        return None
    letters = m.group(3)
    cands = [
        f"Standard_{m.group(1)}{m.group(2)}{letters[:i]}r{letters[i:]}" + (f"_{m.group(4)}" if m.group(4) else "")
        for i in range(len(letters) + 1)
    ]
    for cand in cands:
        sku = find(cand)
        if sku is not None and sku.scales_multi_node and not sku.retired:
            return sku.size
    return None
