"""What an Azure ML job cost, with the source of each figure: an AmlCompute node is billed from allocation to
release, so the run history's start to end on the nodes the job asked for, then the cluster's idle time before
scale-down, which the job's end causes; priced at the catalog's price of the cluster's size. A serverless job
has no cluster: its nodes (``resources.instance_type``) are released when it ends, so no idle time follows."""

from __future__ import annotations

import datetime
from typing import Any

from cloudddp.backends.azureml.client import run_details
from cloudddp.backends.azureml.states import state_of
from cloudddp.catalog.bill import Bill, Figure, catalog_bill


def job_bill(client: Any, run_id: str) -> Bill | None:
    """The bill of job ``run_id`` read through ``client`` (an MLClient); None when the job is not found."""
    from azure.core.exceptions import ResourceNotFoundError

    try:
        job = client.jobs.get(run_id)
    except ResourceNotFoundError:
        return None
    final = state_of(job).terminal
    nodes = int(getattr(job.resources, "instance_count", None) or 1)
    processes = getattr(job.distribution, "process_count_per_instance", None)
    cluster_name = str(job.compute or "").rsplit("/", 1)[-1].removeprefix("azureml:")
    serverless = not cluster_name
    try:
        cluster = None if serverless else client.compute.get(cluster_name)
    except ResourceNotFoundError:  # deleted since: its size, and so the price, are no longer known
        cluster = None
    if serverless:
        size, whose = str(getattr(job.resources, "instance_type", "") or ""), "the job's resources.instance_type"
    else:
        size = str(getattr(cluster, "size", "") or "") or f"(cluster {cluster_name} no longer exists)"
        whose = f"cluster {cluster_name}'s size (compute get)"
    idle = int(getattr(cluster, "idle_time_before_scale_down", None) or 0)
    kept = int(getattr(cluster, "min_instances", None) or 0) >= nodes  # nodes stay up: no scale-down to cause
    details = run_details(client, run_id)
    start, end = details.start_time_utc, details.end_time_utc
    figures = [Figure("nodes", nodes, f"× {size}", f"the job's resources.instance_count; {whose}")]
    ran = _run_time(start, end, final, figures)
    pending = 0.0 if kept or start is None or serverless else float(idle)
    if not kept and start is not None and not serverless:
        figures.append(
            Figure(
                "idle before scale-down",
                idle,
                "s per node",
                f"cluster {cluster_name}'s idle_time_before_scale_down (compute get): billed after "
                "the job ends" + (" (included)" if final else " (to come)"),
            )
        )
    return catalog_bill(
        size=size,
        nodes=nodes,
        billed_s=ran + (pending if final else 0.0),
        figures=figures,
        notes=_notes(job, cluster, cluster_name, nodes, kept=kept),
        final=final,
        processes_per_node=processes,
        ran_s=ran,
        pending_s=0.0 if final else pending,
    )


def _run_time(
    start: datetime.datetime | None, end: datetime.datetime | None, final: bool, figures: list[Figure]
) -> float:
    """Seconds the nodes ran the job (until now while it runs), its figure added to ``figures``."""
    if start is None:
        figures.append(Figure("nodes held", 0, "s", "the run history has no startTimeUtc yet (queued)"))
        return 0.0
    until = end if final and end is not None else datetime.datetime.now(start.tzinfo)
    ran = max(0.0, (until - start).total_seconds())
    figures.append(
        Figure(
            "run time",
            round(ran, 3),
            "s",
            "run history endTimeUtc − startTimeUtc"
            if final and end is not None
            else "now − run history startTimeUtc (running)",
        )
    )
    return ran


def _notes(job: Any, cluster: Any, cluster_name: str, nodes: int, *, kept: bool) -> list[str]:
    """What the bill leaves out, and what it cannot price as billed."""
    notes = [
        "node allocation before the run history's startTimeUtc is billed but not reported, so not included",
        "disks, storage and network are billed apart and not included",
    ]
    if kept:
        notes.append(
            f"cluster {cluster_name} keeps at least {nodes} node(s) up (min_instances): they are billed "
            "whether or not a job runs"
        )
    spot_tier = getattr(getattr(job, "queue_settings", None), "job_tier", None) == "spot"
    if spot_tier or str(getattr(cluster, "tier", "")).lower() == "low_priority":
        notes.append(
            "spot/low priority: priced here at the catalog's on-demand price, an upper bound: Azure bills these nodes "
            "at Spot rates (low-priority VMs for Azure ML move to Spot VMs from 2026-03-31), which the catalog lacks"
        )
    return notes
