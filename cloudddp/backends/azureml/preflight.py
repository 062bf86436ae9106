"""What submit checks before it sends anything: the workspace reachable with these credentials, the VM size
offered in the workspace's region, and quota enough, counted as Azure counts it (quota.py: spot against the
regional low-priority pool, dedicated against the family's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cloudddp.backends.azureml.quota import quota_checks, usage_of
from cloudddp.backends.azureml.workspace import Workspace
from cloudddp.backends.checks import Check

SIGN_IN_FIX = "run `az login`, or set AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET (or use a managed identity)"


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
    size = request["compute"]["size"]
    nodes = request["job"]["resources"]["instance_count"]
    try:
        sizes = {s.name.lower(): s for s in client.compute.list_sizes(location=found.location)}
        offered = size.lower() in sizes
        checks.append(
            Check(
                f"{size} offered in {found.location}",
                offered,
                "",
                fix="pick a size the region offers: `az ml compute list-sizes`",
            )
        )
        vcpus = _field(sizes[size.lower()], "v_cp_us", "vCPUs") if offered else None
        family = _field(sizes[size.lower()], "family", "family") if offered else None
        if offered and family and vcpus:
            usages = [usage_of(u) for u in client.compute.list_usage(location=found.location)]
            spot = request["compute"]["tier"] == "low_priority"
            checks += quota_checks(usages, str(family), int(vcpus), nodes, spot=spot)
    except Exception as e:  # noqa: BLE001
        checks.append(Check(f"{size} offered and quota", None, f"could not check: {str(e).splitlines()[0]}"))
    return checks
