"""Choosing a GPU size: ``skus`` (the catalog's sizes ranked for a workload) and ``plan`` (the size a backend
would use for a job, and why). Offline, like rendering: nothing here imports :mod:`cloudddp.runs`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from cloudddp.backends.commands import json_option, load_job, override_option
from cloudddp.backends.plugins import backend_class, backend_classes
from cloudddp.catalog import CATALOG_DATE, Requirements, all_skus, find, select, workload_for_model
from cloudddp.catalog.model import DATASET_SAMPLES
from cloudddp.catalog.select import CLOUD_REGIONS, UNPRICED, Selection
from cloudddp.catalog.sizing import choose
from cloudddp.cli.confirm import PROXY_MARK, cost_of, region_mark_words
from cloudddp.cli.options import (
    backend_option,
    job_argument,
    money,
    plan_notes,
)
from cloudddp.errors import UserError
from cloudddp.observe.console import err, escape, note, out, print_json


def selection_table(rows: list[dict[str, Any]], *, explain: bool) -> Any:
    """Sizes with their verdicts; with ``explain`` also the rejected ones, then a second table with each size's
    lifecycle and what each part of the job costs (billed time per node and its price for all nodes)."""
    from rich.console import Group
    from rich.table import Table

    def part(cell: dict[str, Any] | None) -> str:
        if not cell:
            return "?"
        secs = cell["s"]
        when = f"{secs:.0f}s" if secs < 120 else f"{secs / 60:.0f}m" if secs < 7200 else f"{secs / 3600:.1f}h"
        return f"{money(cell['cost'])} {when}"

    table = Table(
        "size", "GPUs", "GPU mem", "fabric", "price/h", "est. cost", "efficiency", "verdict", show_lines=False
    )
    parts = Table(
        "size",
        "lifecycle",
        "startup",
        "training",
        "checkpoint",
        "shutdown",
        "idle",
        "total",
        title="cost of each part: price for all nodes, billed time per node",
        show_lines=False,
    )
    for i, row in enumerate(rows):
        if not row["ok"] and not explain:
            continue
        verdict = "[green]chosen[/] " if i == 0 and row["ok"] else "[green]ok[/] " if row["ok"] else "[red]rejected[/] "
        price = money(row["price_per_hour"]) + ("*" if row["price_kind"] == "ec2-proxy" else "")
        price += f" ~{row['price_region']}" if row.get("price_elsewhere") else ""
        eff = f"{row['efficiency']:.0%}" if row["efficiency"] is not None else "?"
        why = "; ".join([row["why"], *row["warnings"]]) if row["why"] or row["warnings"] else ""
        table.add_row(
            row["size"],
            row["gpus"],
            f"{row['gpu_memory_gb']:g} GB",
            row["fabric"],
            price,
            money(row["total_cost"]),
            eff,
            verdict + escape(why),
        )
        breakdown = row.get("breakdown") or {}
        parts.add_row(
            row["size"],
            row.get("lifecycle", ""),
            *(part(breakdown.get(p)) for p in ("startup", "training", "checkpoint", "shutdown", "idle")),
            money(row["total_cost"]),
        )
    return Group(table, parts) if explain else table


@click.command()
@click.option("--cloud", default=None, help="A cloud of the catalog (e.g. azure, aws); default: the backend's.")
@backend_option(None, "Rank the sizes of this backend's cloud.")
@click.option("--gpus", type=int, default=None, help="Total GPUs (default 8).")
@click.option("--gpu", default=None, help="GPU model, e.g. A100.")
@click.option("--min-mem", type=float, default=None, help="Minimum GB per GPU.")
@click.option("--nodes", type=int, default=None, help="Nodes (with --gpus-per-node).")
@click.option("--gpus-per-node", type=int, default=None)
@click.option("--spot", is_flag=True, help="Spot / low priority.")
@click.option("--smddp", is_flag=True, help="SageMaker's data-parallel library (AWS).")
@click.option(
    "--model", default="resnet18", show_default=True, help="Workload for the estimate: resnet18, resnet50, cnn."
)
@click.option("--dataset", default="cifar10", show_default=True, help="cifar10, imagenet, digits.")
@click.option("--epochs", type=int, default=30, show_default=True)
@click.option("--batch", type=int, default=256, show_default=True, help="Per-GPU batch.")
@click.option("--explain", is_flag=True, help="Also list rejected sizes with the reason.")
@json_option
def skus(
    cloud: str | None,
    backend: str | None,
    gpus: int | None,
    gpu: str | None,
    min_mem: float | None,
    nodes: int | None,
    gpus_per_node: int | None,
    spot: bool,
    smddp: bool,
    model: str,
    dataset: str,
    epochs: int,
    batch: int,
    explain: bool,
    json_: bool,
) -> None:
    """GPU sizes for a job, ranked by the estimated cost of the whole job, each with its reasons.

    \b
    Examples:
      cloudddp skus -b sagemaker --gpus 8 --gpu A100
      cloudddp skus --cloud azure --nodes 2 --explain
    """
    if cloud is None:
        sized = [cls for cls in backend_classes() if cls.cloud]
        chosen = backend_class(backend) if backend else (sized[0] if sized else None)
        if chosen is None or chosen.cloud is None:
            raise UserError(f"the {backend} backend chooses no size", hint="give --cloud or a backend with a cloud")
        cloud = chosen.cloud
    known = sorted({sku.cloud for sku in all_skus()})
    if cloud not in known:
        raise UserError(f"--cloud {cloud!r}: the catalog has sizes for {', '.join(known)}")

    if dataset not in DATASET_SAMPLES:
        raise UserError(f"--dataset {dataset!r}: use one of {', '.join(DATASET_SAMPLES)}")
    workload = workload_for_model(model, DATASET_SAMPLES[dataset], epochs, batch)
    if workload is None:
        raise UserError(f"--model {model!r}: use resnet18, resnet18-imagenet, resnet50 or cnn")
    req = Requirements(
        cloud=cloud,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        total_gpus=gpus or (None if nodes else 8),
        accelerator=gpu,
        min_gpu_memory_gb=min_mem,
        spot=spot,
        smddp=smddp,
        workload=workload,
    )
    selection = select(req)
    if json_:
        print_json(selection.to_dict())
        return
    out().print(selection_table(selection.explain(), explain=explain))
    out().print(
        f"[dim]catalog of {CATALOG_DATE}; estimate for {model} on {dataset}, {epochs} epochs, batch {batch}/GPU[/]"
    )
    for line in plan_footer(selection, explain=explain):
        out().print(f"[dim]{escape(line)}[/]")
    if selection.chosen is None:
        err().print("[yellow]no size fits; --explain shows why each was rejected[/]")


@click.command()
@job_argument
@backend_option(None, "The backend whose sizes to rank (required).")
@override_option
@click.option("--explain", is_flag=True, help="List every size with its verdict.")
@json_option
def plan(job: Path, backend: str | None, override: tuple[str, ...], explain: bool, json_: bool) -> None:
    """The size a backend would use for the job, why, its cost estimate and the NCCL/EFA presets applied.

    \b
    Examples:
      cloudddp plan job.yaml -b sagemaker
      cloudddp plan job.yaml -b azureml --explain
    """
    if backend is None:
        sized = [cls.name for cls in backend_classes() if cls.cloud]
        raise UserError("give --backend: the backend whose sizes to rank", hint=f"one of: {', '.join(sized)}")
    spec = load_job(job, override)
    impl = backend_class(backend)()
    # Settings only a submit needs (SageMaker's role) do not stop a plan: a stand-in takes their place, said so.
    stand_ins = [m for m in impl.missing_settings(spec) if m.needed_to_render and m.stand_in]
    if stand_ins:
        spec = load_job(job, (*override, *(f"{m.field}={m.stand_in}" for m in stand_ins)))
    rendered = impl.render(spec)
    rendered.warnings += [
        f"{m.field} is not set: this plan uses a stand-in; submit needs {m.what} (e.g. {m.example})" for m in stand_ins
    ]
    target = impl.size_target(spec)
    # A named size without a catalog row was checked by the render itself (SageMaker: EC2's data); no ranking.
    ranked = target is not None and spec.resources.gpus_per_node and (not target.named or find(target.named))
    selection = choose(spec, target) if target is not None and ranked else None
    if json_:
        print_json({"plan": rendered.to_dict(), "selection": selection.to_dict() if selection else None})
        return
    plan_notes(rendered)
    if target is None:
        note(f"the {impl.name} backend chooses no size here: its plan is above")
    if selection is not None:
        out().print(selection_table(selection.explain(), explain=explain))
        for line in plan_footer(selection, explain=explain):
            out().print(f"[dim]{escape(line)}[/]")
    cost = cost_of(rendered, float(spec.limits.max_runtime))
    said = (PROXY_MARK, region_mark_words(cost.price_region or "")) if cost else ()  # the footer above says them
    for line in cost.lines() if cost else []:
        if line not in said:
            out().print(escape(line))


def plan_footer(selection: Selection, *, explain: bool) -> list[str]:
    """What the table's marks mean, and the sizes left out of it for want of a price (never silently)."""
    rows = selection.explain()
    lines = [PROXY_MARK] if any(r["price_kind"] == "ec2-proxy" for r in rows) else []
    if any(r["price_elsewhere"] for r in rows if r["ok"] or explain):
        where = selection.requirements.region or CLOUD_REGIONS.get(selection.requirements.cloud)
        lines.append(
            f"~REGION = the catalog has no price for the size in {where}: the price shown is REGION's, the region "
            "that lists it (prices differ between regions)"
        )
    unpriced = [c.sku.size for c in selection.candidates if UNPRICED in c.reasons and len(c.reasons) == 1]
    if unpriced and not explain:
        lines.append(
            f"not chosen, no dated price in the catalog: {', '.join(unpriced)} (they fit otherwise; name one in the "
            "spec to use it; --explain lists every size with its verdict)"
        )
    return lines
