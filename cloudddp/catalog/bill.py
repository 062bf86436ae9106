"""What a run cost, from its backend's own figures.

A backend reports a :class:`Bill` (the ``_bill`` hook of the backend contract): the time each node was billed
or held, the nodes, the price where there is one, and every figure with where it came from (an API field, a
clock, the catalog). The runner's cost report (:mod:`cloudddp.runs.cost`) puts it next to the estimate.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from cloudddp.catalog.skus import CATALOG_DATE, find


@dataclass(frozen=True)
class Figure:
    """One number of a bill and where it came from."""

    name: str
    value: float | int | str | None
    unit: str
    source: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Bill:
    """What a run cost (so far, while it is going), from what its backend reports."""

    final: bool
    """The run has ended: nothing more is billed except ``pending_s``."""
    size: str
    """What it ran on: an instance type, a VM size, ``local:cpu`` / ``local:cuda``."""
    nodes: int
    processes_per_node: int | None
    billed_s: float
    """Per node: the time each node is billed for (or, with no price, held)."""
    price_per_hour: float | None
    """All nodes together, USD/h; None where there is no price (this machine)."""
    cost: float | None
    """USD; None where there is no price."""
    resource_hours: float | None = None
    resource_unit: str = ""
    """``GPU-hours`` or ``CPU-hours``."""
    ran_s: float | None = None
    """Wall time the training processes ran (what a measured step time is divided from)."""
    pending_s: float = 0.0
    """Per node, still to be billed after the run's end (an autoscaling cluster's idle time before scale-down)."""
    savings: float | None = None
    """Fraction saved by spot capacity, where the backend reports it."""
    figures: tuple[Figure, ...] = ()
    notes: tuple[str, ...] = ()
    """What the figures leave out."""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["figures"] = [f.to_dict() for f in self.figures]
        data["notes"] = list(self.notes)
        return data


def catalog_bill(
    *,
    size: str,
    nodes: int,
    billed_s: float,
    figures: list[Figure],
    notes: list[str],
    **rest: Any,
) -> Bill:
    """The bill of ``nodes`` cloud nodes of ``size``, each billed ``billed_s``, at the catalog's price (the one
    estimates use, added to ``figures`` with its source), with GPU-hours where the catalog knows the GPUs.
    ``rest``: the other :class:`Bill` fields (final, processes_per_node, ran_s, ...)."""
    sku = find(size)
    price = sku.price_per_hour if sku is not None else None
    if sku is None or price is None:
        why = "not in the GPU catalog" if sku is None else "the catalog has no price for it"
        price_figure = Figure("price per node", None, "USD/h", f"{size}: {why}")
    else:
        kind = (
            "EC2 on-demand price, a lower bound for SageMaker's"
            if sku.price_kind == "ec2-proxy"
            else "list price, on-demand"
        )
        where = f"catalog of {CATALOG_DATE}: {kind} in {sku.price_region} ({sku.price_date})"
        price_figure = Figure("price per node", price, "USD/h", where)
    gpus = sku.gpus if sku is not None else 0
    return Bill(
        size=size,
        nodes=nodes,
        billed_s=billed_s,
        price_per_hour=price * nodes if price is not None else None,
        cost=price * nodes * billed_s / 3600 if price is not None else None,
        resource_hours=billed_s * nodes * gpus / 3600 if gpus else None,
        resource_unit="GPU-hours" if gpus else "",
        figures=(*figures, price_figure),
        notes=tuple(notes),
        **rest,
    )
