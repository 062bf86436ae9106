"""What submit checks before it sends anything: the workspace reachable with these credentials, the VM size
offered in the workspace's region (and, for a spot job, taking low-priority nodes there: the size list's
``lowPriorityCapable``), and quota enough, counted as Azure counts it (quota.py: spot against the regional
low-priority pool, dedicated against the family's). Serverless jobs use the same quota as a cluster of their size
and tier; a job on an existing cluster is counted by the cluster's own size and tier, not the plan's."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cloudddp.backends.azureml.client import SIGN_IN_FIX
from cloudddp.backends.azureml.cluster import tier_of
from cloudddp.backends.azureml.decide import LOW_PRIORITY
from cloudddp.backends.azureml.quota import quota_checks, usage_of
from cloudddp.backends.azureml.workspace import Workspace
from cloudddp.backends.checks import Check


def _field(obj: Any, snake: str, camel: str, default: Any = None) -> Any:
    """azure-ai-ml leaves some snake_case attributes of VmSize/Usage None; the camelCase keys hold the value."""
    value = getattr(obj, snake, None)
    if value is None:
        value = vars(obj).get(camel)
    if value is not None and not isinstance(value, (int, float, str, dict)):
        value = vars(value)
    return default if value is None else value


def preflight_checks(connect: Callable[[], Any], ws: Workspace, request: dict[str, Any]) -> list[Check]:
    """The checks of the plan's ``request`` (``{"job", "compute"}``) in workspace ``ws``, through the MLClient that
    ``connect`` makes; a check that could not be made is ``ok=None``, saying why."""
    try:
        client = connect()
        found = client.workspaces.get(ws.name)
    except Exception as e:  # noqa: BLE001 - any failure here is "cannot reach the workspace"
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return [Check("workspace reachable", False, first, fix=SIGN_IN_FIX + "; check the workspace in azureml.*")]
    checks = [Check("workspace reachable", True, f"{ws.name} in {found.location}")]
    nodes = request["job"]["resources"]["instance_count"]
    try:
        target = quota_target(client, request)
        checks += target.checks
        checks += _size_and_quota(client, found.location, target, nodes, ws.name)
    except Exception as e:  # noqa: BLE001
        size = request["job"]["resources"].get("instance_type") or (request["compute"] or {}).get("size")
        checks.append(Check(f"{size} offered and quota", None, f"could not check: {str(e).splitlines()[0]}"))
    return checks


@dataclass(frozen=True)
class QuotaTarget:
    """What the job's nodes are counted as: a size and a tier, and why that tier when it is not the job's."""

    size: str
    spot: bool
    note: str = ""
    """Said on the quota checks when the tier is an existing cluster's, not the one the job asks for."""
    checks: list[Check] = field(default_factory=list)
    """What the existing cluster itself fails (another size than the job's)."""


def quota_target(client: Any, request: dict[str, Any]) -> QuotaTarget:
    """Serverless: the job's instance type and tier. A cluster that exists: its own size and tier, which decide
    where its nodes count (a spot job on a dedicated cluster uses dedicated quota). Else the cluster to create."""
    from azure.core.exceptions import ResourceNotFoundError

    compute, job = request["compute"], request["job"]
    if compute is None:
        return QuotaTarget(job["resources"]["instance_type"], job["queue_settings"]["job_tier"] == "spot")
    wanted_spot = compute["tier"] == LOW_PRIORITY
    try:
        cluster = client.compute.get(compute["name"])
    except ResourceNotFoundError:
        return QuotaTarget(compute["size"], wanted_spot)
    size, spot, name = str(cluster.size or compute["size"]), tier_of(cluster) == LOW_PRIORITY, compute["name"]
    note = ""
    if spot != wanted_spot:
        asked = "spot (resources.spot: true)" if wanted_spot else "dedicated (resources.spot: false)"
        note = f"; cluster {name} is {tier_of(cluster)}: its nodes count there, although the job asks for {asked}"
    checks = []
    if size.lower() != compute["size"].lower():
        checks.append(
            Check(
                f"cluster {name} has the job's size",
                False,
                f"cluster {name} exists with size {size}, the job needs {compute['size']}",
                fix="name another cluster in azureml.compute, set azureml.vm_size to its size, or set "
                "azureml.compute: auto (a cluster per size and tier)",
            )
        )
    return QuotaTarget(size, spot, note, checks)


def _size_and_quota(client: Any, location: str, target: QuotaTarget, nodes: int, workspace: str) -> list[Check]:
    size = target.size
    sizes = {s.name.lower(): s for s in client.compute.list_sizes(location=location)}
    offered = size.lower() in sizes
    checks = [
        Check(
            f"{size} offered in {location}",
            offered,
            "" if offered else f"{size} is not in the region's list of sizes (compute list-sizes)",
            fix="pick a size the region offers: `az ml compute list-sizes`",
        )
    ]
    if offered and target.spot:
        checks.append(_low_priority(size, location, sizes[size.lower()]))
    vcpus = _field(sizes[size.lower()], "v_cp_us", "vCPUs") if offered else None
    family = _field(sizes[size.lower()], "family", "family") if offered else None
    if offered and family and vcpus:
        usages = [usage_of(u) for u in client.compute.list_usage(location=location)]
        found = quota_checks(usages, str(family), int(vcpus), nodes, spot=target.spot, workspace=workspace)
        checks += [dataclasses.replace(c, detail=c.detail + target.note) if target.note else c for c in found]
    return checks


def _low_priority(size: str, location: str, listed: Any) -> Check:
    """Whether ``size`` takes low-priority (spot) nodes: the ``lowPriorityCapable`` of the region's size list
    (B-series and promo sizes do not); a size that does not say is not refused."""
    capable = _field(listed, "low_priority_capable", "lowPriorityCapable")
    label = f"{size} takes spot nodes in {location}"
    if capable is None:
        return Check(label, None, "the region's size list does not say (lowPriorityCapable)")
    detail = "" if capable else f"{size} does not take low-priority (spot) nodes: its lowPriorityCapable is false"
    fix = "set resources.spot: false, or pick a size that takes spot nodes (`az ml compute list-sizes`)"
    return Check(label, bool(capable), detail, fix=fix)
