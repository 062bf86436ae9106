"""The catalog checks itself: every row's facts, sources and dates, and rows that contradict each other.

``problems(rows)`` returns one line per problem; the test suite requires none for the shipped data.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable

from cloudddp.catalog.skus import CATALOG_DATE, LIFECYCLES, RDMA_FABRICS, Sku

FABRICS = ("infiniband", "efa", "ethernet")
PRICE_KINDS = ("list", "ec2-proxy")
NVLINK_SPREAD = 2.0
"""Two sizes with the same GPU on NVLink may differ in intra-node bandwidth by at most this factor."""


def _iso(text: str) -> bool:
    try:
        dt.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def row_problems(s: Sku) -> list[str]:
    """What is missing or impossible in one row."""
    out = []
    if s.gpus <= 0 or s.gpu_mem_gb <= 0 or s.vcpus <= 0 or s.ram_gb <= 0:
        out.append(f"{s.size}: counts must be positive")
    if s.fabric not in FABRICS:
        out.append(f"{s.size}: fabric {s.fabric!r} is not one of {FABRICS}")
    if s.fabric in RDMA_FABRICS and not (s.fabric_gbps and s.fabric_gbps > 0):
        out.append(f"{s.size}: {s.fabric} size without a fabric bandwidth")
    if (s.gpus == 1) != (s.intranode == "single-gpu"):
        out.append(f"{s.size}: {s.gpus} GPU(s) but intranode {s.intranode!r}")
    if s.gpus > 1 and s.intranode_gb_s <= 0:
        out.append(f"{s.size}: {s.gpus} GPUs without an intra-node bandwidth")
    if s.lifecycle not in LIFECYCLES or not s.lifecycle_source:
        out.append(f"{s.size}: lifecycle {s.lifecycle!r} must be one of {LIFECYCLES}, with its source")
    if s.lifecycle == "on-sale" and s.lifecycle_date:
        out.append(f"{s.size}: on sale but dated {s.lifecycle_date}")
    if s.lifecycle in ("retiring", "retired") and not _iso(s.lifecycle_date):
        out.append(f"{s.size}: {s.lifecycle} without an ISO date")
    elif s.lifecycle == "retired" and s.lifecycle_date > CATALOG_DATE:
        out.append(f"{s.size}: retired on {s.lifecycle_date}, after the catalog date {CATALOG_DATE}")
    if s.price_per_hour is not None:
        if s.price_per_hour <= 0 or not s.price_source or not s.price_region or s.price_kind not in PRICE_KINDS:
            out.append(f"{s.size}: a price needs a positive value, a source, a region and a kind in {PRICE_KINDS}")
        if not _iso(s.price_date) or s.price_date > CATALOG_DATE:
            out.append(f"{s.size}: price date {s.price_date!r} is not an ISO date on or before {CATALOG_DATE}")
    elif s.price_kind or s.price_source or s.price_date:
        out.append(f"{s.size}: no price but a price kind/source/date")
    return out


def family_problems(rows: Iterable[Sku]) -> list[str]:
    """Sizes of one family agree on cloud, GPU model, the interconnect inside the node and the fabric."""
    out = []
    families: dict[str, list[Sku]] = defaultdict(list)
    for s in rows:
        families[s.family].append(s)
    for name, members in families.items():
        for attr in ("cloud", "gpu_model", "fabric"):
            values = {getattr(s, attr) for s in members}
            if len(values) > 1:
                out.append(f"family {name}: sizes disagree on {attr}: {sorted(values)}")
        multi = {(s.intranode, s.intranode_gb_s) for s in members if s.gpus > 1}
        if len(multi) > 1:
            out.append(f"family {name}: multi-GPU sizes disagree on the intra-node link: {sorted(multi)}")
    return out


def contradictions(rows: Iterable[Sku]) -> list[str]:
    """Rows that contradict each other across families."""
    out = []
    rows = list(rows)
    names = [s.size.lower() for s in rows]
    out += [f"{n}: listed twice" for n in sorted({n for n in names if names.count(n) > 1})]
    same_board: dict[tuple[str, int], set[tuple[str, float]]] = defaultdict(set)
    nvlink: dict[str, list[Sku]] = defaultdict(list)
    for s in rows:
        if s.gpus > 1:
            same_board[(s.gpu_model, s.gpus)].add((s.intranode, s.intranode_gb_s))
        if s.intranode == "nvlink":
            nvlink[s.gpu].append(s)
    for (model, gpus), links in same_board.items():
        if len(links) > 1:
            out.append(f"{gpus}× {model}: sizes disagree on the intra-node link: {sorted(links)}")
    for gpu, group in nvlink.items():
        low, high = min(s.intranode_gb_s for s in group), max(s.intranode_gb_s for s in group)
        if high > NVLINK_SPREAD * low:
            out.append(
                f"{gpu} on NVLink: intra-node bandwidth from {low:g} to {high:g} GB/s across "
                f"{', '.join(s.size for s in group)}"
            )
    return out


def problems(rows: Iterable[Sku]) -> list[str]:
    rows = list(rows)
    out = [p for s in rows for p in row_problems(s)]
    out += family_problems(rows)
    out += contradictions(rows)
    dates = [s.price_date for s in rows if s.price_per_hour is not None]
    if dates and max(dates) != CATALOG_DATE:
        out.append(f"CATALOG_DATE {CATALOG_DATE} is not the newest price date {max(dates)}")
    return out
