"""Changing an existing AmlCompute cluster the way its owner would: only what the job needs, nothing else.

A cluster that exists may be someone's, set up with a subnet, an identity, SSH settings or a scale-down
delay of their own. azure-ai-ml's ``compute.begin_update`` (what ``az ml compute update`` calls) sends a
full PUT of the entity it is given, so updating from cloudddp's rendered compute would overwrite those.
Growing a cluster therefore goes through the ARM ``Compute - Update`` operation (``PATCH .../computes/<name>``,
the one PowerShell's ``Update-AzMLWorkspaceCompute -MaxNodeCount`` uses), whose body carries only the scale
settings: ``maxNodeCount`` raised, ``minNodeCount`` and ``nodeIdleTimeBeforeScaleDown`` as the cluster
has them (the REST model defaults a missing ``minNodeCount`` to 0, so it is sent unchanged, not left out).
The request goes through azure-core's public pipeline with the MLClient's credential and transport.

The update is asynchronous whatever the status code: the REST example (``Compute/patch.json``) answers **200**
with ``provisioningState: Updating`` and an ``Azure-AsyncOperation`` header, which azure-ai-ml's
``begin_update`` polls (ARMPolling). So the operation is polled until it ends (``Succeeded``), on 200 as on 202,
and without an operation URL the cluster itself is read until its ``provisioningState`` is ``Succeeded``; the
job is submitted only to a cluster that has finished growing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from cloudddp.backends.azureml.limits import suggest_cluster
from cloudddp.errors import CloudDDPError, UserError

ARM = "https://management.azure.com"
API_VERSION = "2024-04-01"  # a GA version of Microsoft.MachineLearningServices that has Compute - Update
SCOPE = "https://management.azure.com/.default"
_DONE = {"succeeded", "failed", "canceled", "cancelled"}


def tier_of(cluster: Any) -> str:
    """``dedicated`` or ``low_priority`` for an AmlCompute entity (the service says Dedicated/LowPriority)."""
    raw = str(getattr(cluster, "tier", "") or "dedicated").lower().replace("lowpriority", "low_priority")
    return "low_priority" if raw == "low_priority" else "dedicated"


def tier_mismatch(name: str, cluster: Any, spot: bool) -> str | None:
    """A warning when the cluster's tier is not the one the job asks for (``resources.spot``), else None; the
    cluster it suggests has a name Azure ML accepts (limits.py)."""
    tier = tier_of(cluster)
    if spot and tier == "dedicated":
        return (
            f"cluster {name} is dedicated but the job asks for spot (resources.spot: true): it runs at the "
            f"dedicated price; to run it on low priority, name a low-priority cluster in azureml.compute "
            f"(e.g. azureml.compute={suggest_cluster(name, '-lowpri')}: cloudddp creates it)"
        )
    if not spot and tier == "low_priority":
        return (
            f"cluster {name} is low priority but the job is not spot (resources.spot: false): it can be "
            f"preempted; name a dedicated cluster in azureml.compute (e.g. "
            f"azureml.compute={suggest_cluster(name, '-dedicated')}: cloudddp creates it), or set resources.spot: true"
        )
    return None


def scale_settings(cluster: Any, max_nodes: int) -> dict[str, Any]:
    """The PATCH body that raises ``max_instances`` to ``max_nodes`` and leaves everything else as it is."""
    settings: dict[str, Any] = {"maxNodeCount": max_nodes, "minNodeCount": int(cluster.min_instances or 0)}
    idle = getattr(cluster, "idle_time_before_scale_down", None)
    if idle:
        settings["nodeIdleTimeBeforeScaleDown"] = f"PT{int(idle)}S"  # ISO 8601, as the service stores it
    return {"properties": {"properties": {"scaleSettings": settings}}}


def compute_url(subscription_id: str, resource_group: str, workspace: str, name: str) -> str:
    return (
        f"{ARM}/subscriptions/{subscription_id}/resourceGroups/{resource_group}/providers/"
        f"Microsoft.MachineLearningServices/workspaces/{workspace}/computes/{name}?api-version={API_VERSION}"
    )


def grow(
    credential: Any,
    transport: Any,
    url: str,
    body: dict[str, Any],
    *,
    poll_seconds: float,
    timeout: float = 1800,
    progress: Callable[[str], None] | None = None,
) -> None:
    """PATCH the scale settings and wait until the update has succeeded, saying so on ``progress`` each poll. A
    transport that was passed in is shared with the MLClient and left open."""
    from azure.core import PipelineClient
    from azure.core.pipeline.policies import HeadersPolicy, RetryPolicy, UserAgentPolicy
    from azure.mgmt.core.policies import ARMChallengeAuthenticationPolicy

    policies = [
        HeadersPolicy(),
        UserAgentPolicy("cloudddp"),
        RetryPolicy(),
        ARMChallengeAuthenticationPolicy(credential, SCOPE),
    ]
    client: Any = PipelineClient(ARM, policies=policies, **({"transport": transport} if transport is not None else {}))
    try:
        _patch_and_wait(client, url, body, poll_seconds, timeout, progress or (lambda _: None))
    finally:
        if transport is None:
            client.close()


def _json(response: Any) -> dict[str, Any]:
    data = response.json() if response.text() else {}
    return data if isinstance(data, dict) else {}


def _state_of(client: Any, url: str, operation: str | None, location: bool) -> tuple[str, str]:
    """The operation's ``status`` and error message, or (no operation URL) the cluster's ``provisioningState``. A
    ``Location`` URL (ARM's other long-running pattern) has no status: 202 is under way, 200/204 is done."""
    from azure.core.rest import HttpRequest

    response = client.send_request(HttpRequest("GET", operation or url))
    response.raise_for_status()
    data = _json(response)
    if operation and location:
        return ("InProgress" if response.status_code == 202 else "Succeeded"), ""
    if operation:
        error = data.get("error") or {}
        return str(data.get("status", "")), str(error.get("message", "") if isinstance(error, dict) else error)
    props = data.get("properties", {})
    errors = props.get("provisioningErrors") or []
    return str(props.get("provisioningState", "")), "; ".join(
        str((e.get("error") or {}).get("message", "")) for e in errors if isinstance(e, dict)
    )


def _patch_and_wait(
    client: Any, url: str, body: dict[str, Any], poll_seconds: float, timeout: float, progress: Callable[[str], None]
) -> None:
    from azure.core.rest import HttpRequest

    response = client.send_request(HttpRequest("PATCH", url, json=body))
    response.raise_for_status()
    asynchronous = response.headers.get("Azure-AsyncOperation")
    operation = asynchronous or response.headers.get("Location")
    state = str(_json(response).get("properties", {}).get("provisioningState", "") or "Updating")
    if not operation and state.lower() == "succeeded":
        return
    name = url.split("?", 1)[0].rsplit("/", 1)[-1]
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        state, error = _state_of(client, url, operation, location=bool(operation) and not asynchronous)
        if state.lower() in _DONE:
            if state.lower() != "succeeded":
                raise CloudDDPError(
                    f"growing cluster {name} ended {state}"
                    + (f": {error}" if error else "")
                    + "; see the cluster in Azure ML studio",
                )
            progress(f"cluster {name} grown ({time.monotonic() - started:.0f} s)")
            return
        progress(f"growing cluster {name}: {state or 'Updating'} ({time.monotonic() - started:.0f} s)")
        time.sleep(poll_seconds)
    raise CloudDDPError(f"growing cluster {name} did not finish in {timeout:.0f} s; see the cluster in Azure ML studio")


def no_compute_write(name: str, error: Any, doing: str = "creating") -> UserError:
    """A 403 on creating or growing cluster ``name``, said with the permission it needs and the ways out."""
    first = (error.message or str(error)).strip().splitlines()[0]
    return UserError(
        f"{doing} cluster {name} needs Microsoft.MachineLearningServices/workspaces/computes/write, which "
        f"these credentials lack (the built-in AzureML Data Scientist role has it in its NotActions): {first}",
        hint="remove azureml.compute to run on serverless compute (no cluster to change), ask the workspace's "
        "owner to do it (then submit again), or get a role with computes/write",
    )
