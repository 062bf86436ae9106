"""A cluster job's AmlCompute cluster, made ready before the job is sent: created from the plan's ``compute.yml``
when it is missing; when it exists, refused if Azure left it Failed or it has another size, and grown when it is
smaller than the job (raising only its ``max_instances``, cluster.py). A cluster of the other tier runs the job
with a warning (:func:`tier_warning`)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from cloudddp.backends.azureml.client import AzureClients
from cloudddp.backends.azureml.cluster import compute_url, grow, no_compute_write, scale_settings, tier_mismatch
from cloudddp.backends.azureml.workspace import AzureMLTarget, require_workspace
from cloudddp.backends.base import Progress
from cloudddp.errors import CloudDDPError, UserError
from cloudddp.plan import Plan

_FAILED_CLUSTER_FIX = (
    "Azure keeps a cluster that failed, in state Failed: once the cause is fixed, delete it "
    "(az ml compute delete --name {name}) and submit again, or name another cluster in azureml.compute"
)


def existing_cluster(client: Any, name: str) -> Any:
    """Cluster ``name`` of the workspace of ``client`` (an MLClient), or None when there is none."""
    from azure.core.exceptions import ResourceNotFoundError

    try:
        return client.compute.get(name)
    except ResourceNotFoundError:
        return None


def tier_warning(plan: Plan[dict[str, Any], AzureMLTarget], cluster: Any) -> str | None:
    """A dedicated cluster for a spot job (or the reverse) runs it, but not as the spec asked: what to say."""
    wanted = plan.request["compute"]
    return tier_mismatch(wanted["name"], cluster, spot=wanted["tier"] == "low_priority")


def ready_cluster(
    client: Any,
    clients: AzureClients,
    plan: Plan[dict[str, Any], AzureMLTarget],
    current: Any,
    *,
    poll_seconds: float,
    progress: Progress | None,
) -> None:
    """The plan's cluster, ready for the job: created when it is missing (``current``, the cluster as it is, None);
    refused when it cannot run the job; when it is smaller than the job, its max_instances raised and nothing else
    (its subnet, identity, SSH and scale-down settings stay the owner's)."""
    from azure.core.exceptions import HttpResponseError

    wanted = plan.request["compute"]
    if current is None:
        create_cluster(client, plan, poll_seconds=poll_seconds, progress=progress)
        return
    _refuse_unusable(current, wanted)
    have = current.max_instances or 0
    if have >= plan.request["job"]["resources"]["instance_count"]:
        if progress:
            progress.step(f"cluster {wanted['name']} is ready ({wanted['size']}, up to {have} nodes)")
        return

    if progress:
        progress.step(
            f"growing cluster {wanted['name']}: max_instances {have} -> {wanted['max_instances']} "
            "(nothing else changes)"
        )
    ws = require_workspace(plan.target.workspace)
    url = compute_url(ws.subscription_id, ws.resource_group, ws.name, wanted["name"])
    try:
        grow(
            clients.credential(),
            clients.transport,
            url,
            scale_settings(current, wanted["max_instances"]),
            poll_seconds=poll_seconds,
            progress=progress.step if progress else None,
        )
    except HttpResponseError as e:
        if e.status_code == 403:
            raise no_compute_write(wanted["name"], e, doing="growing") from None
        raise


def _refuse_unusable(current: Any, wanted: dict[str, Any]) -> None:
    """An existing cluster the job cannot run on: left Failed by Azure, or of another size."""
    state = getattr(current, "provisioning_state", None)
    if str(getattr(state, "value", state) or "").lower() == "failed":  # the SDK gives an enum
        reason = getattr(current, "provisioning_errors", None)
        raise CloudDDPError(
            f"cluster {wanted['name']} is in state Failed"
            + (f" ({reason})" if reason else "")
            + ": a job sent to it would never start. "
            + _FAILED_CLUSTER_FIX.format(name=wanted["name"])
        )
    if str(getattr(current, "size", "")).lower() != wanted["size"].lower():
        raise UserError(
            f"cluster {wanted['name']} exists with size {current.size}, the job needs {wanted['size']}",
            hint="name another cluster in azureml.compute, or set azureml.vm_size to its size",
        )


def create_cluster(
    client: Any, plan: Plan[dict[str, Any], AzureMLTarget], *, poll_seconds: float, progress: Progress | None
) -> None:
    """The plan's ``compute.yml`` through the SDK's own ``load_compute``, created and waited for."""
    from azure.ai.ml import load_compute
    from azure.core.exceptions import HttpResponseError

    wanted = plan.request["compute"]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "compute.yml"
        path.write_text(plan.documents["compute.yml"])
        compute = load_compute(source=path)
    if progress:
        progress.step(
            f"creating cluster {wanted['name']} ({wanted['size']}, {wanted['tier']}, "
            f"{wanted['min_instances']}–{wanted['max_instances']} nodes)"
        )
    try:
        poller = client.compute.begin_create_or_update(compute)
    except HttpResponseError as e:
        if e.status_code == 403:
            raise no_compute_write(wanted["name"], e) from None
        raise
    started = time.monotonic()
    try:
        while not poller.done():
            if progress:
                progress.step(f"provisioning {wanted['name']}: {poller.status()} ({time.monotonic() - started:.0f} s)")
            poller.wait(poll_seconds)
        poller.result()
    except HttpResponseError as e:  # the creation's operation ended Failed (wait re-raises what polling met)
        reason = (e.message or str(e)).strip().splitlines()[0].rstrip(".")
        raise CloudDDPError(
            f"creating cluster {wanted['name']} ended Failed: {reason}. The job was not submitted. "
            + _FAILED_CLUSTER_FIX.format(name=wanted["name"])
        ) from None
