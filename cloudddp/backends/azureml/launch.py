"""Sending an Azure ML plan: a job of the plan's name that exists already is this plan's (a retried launch finds
it instead of submitting another); what preflight could not check is said; a cluster job's cluster is made ready
(provision.py; a serverless job needs none); then the rendered ``job.yml`` goes through the SDK's own
``load_job``, so what runs is what was rendered, with the secrets set on the entity, never on disk. A refusal for
quota at submission is said as such (:class:`~cloudddp.backends.checks.RefusedForCapacity`).
"""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path
from typing import Any

from cloudddp.backends.azureml.client import AzureClients
from cloudddp.backends.azureml.failures import failure_cause, failure_message
from cloudddp.backends.azureml.provision import existing_cluster, ready_cluster, tier_warning
from cloudddp.backends.azureml.quota import QUOTA_FIX
from cloudddp.backends.azureml.record import AzureMLRunInfo
from cloudddp.backends.azureml.workspace import AzureMLTarget, require_workspace
from cloudddp.backends.base import Launched, Progress
from cloudddp.backends.checks import Check, RefusedForCapacity
from cloudddp.backends.status import Cause
from cloudddp.plan import Plan


def submit(
    plan: Plan[dict[str, Any], AzureMLTarget],
    clients: AzureClients,
    *,
    provision: bool,
    unchecked: list[Check],
    poll_seconds: float,
    progress: Progress | None,
) -> Launched:
    """The plan's job submitted (or found), and what its run record keeps. ``unchecked``: the preflight checks
    that could not be made, said before anything is sent."""
    from azure.core.exceptions import ResourceNotFoundError

    workspace = plan.target.workspace
    info = AzureMLRunInfo(workspace=require_workspace(workspace)).to_dict()
    client = clients.client(workspace)
    name = plan.request["job"]["name"]
    try:
        client.jobs.get(name)
        if progress:
            progress.step(f"job {name} already exists: not submitting it again")
        return Launched(name, info)
    except ResourceNotFoundError:
        pass
    for check in unchecked:
        warn(f"not checked: {check.name}: {check.detail}", progress)
    if plan.request["compute"] is None:
        if progress:
            progress.step("serverless compute: Azure ML provisions the nodes for this job; no cluster to create")
    else:
        cluster = existing_cluster(client, plan.request["compute"]["name"])
        warning = None if cluster is None else tier_warning(plan, cluster)
        if warning:
            warn(warning, progress)
        if provision:
            ready_cluster(client, clients, plan, cluster, poll_seconds=poll_seconds, progress=progress)
    job = loaded_job(plan)
    if progress:
        progress.step(f"uploading code snapshot of {job.code} (skipped when unchanged)")
    sent(client, job, plan)
    if progress:
        progress.step(f"submitted {name}")
    return Launched(name, info)


def sent(client: Any, job: Any, plan: Plan[dict[str, Any], AzureMLTarget]) -> None:
    """Submit ``job``; Azure ML's refusal for quota is :class:`RefusedForCapacity`, so a recovery that can move takes
    the next size at once. A serverless job whose VM family has too little quota for its nodes is refused at submission
    (https://learn.microsoft.com/azure/machine-learning/how-to-use-serverless-compute, "Quota", read 2026-12-06);
    one whose quota other jobs use is accepted and waits ``Queued`` (:data:`~.states.WAITING`)."""
    from azure.core.exceptions import HttpResponseError

    try:
        client.jobs.create_or_update(job)
    except HttpResponseError as e:
        error = refusal(e)
        if e.status_code not in (401, 403) and failure_cause(error) is Cause.CAPACITY:
            size = plan.request["job"].get("resources", {}).get("instance_type") or "its size"
            raise RefusedForCapacity(
                f"Azure ML refused the job for quota on {size}: {failure_message(error)}", hint=QUOTA_FIX
            ) from None
        raise


def refusal(error: Any) -> dict[str, Any]:
    """The error body of a refused request (``{"code", "message", "details"}``), else what azure-core kept of it."""
    try:
        body = json.loads(error.response.text())
    except (AttributeError, TypeError, ValueError):
        body = None
    root = body.get("error") if isinstance(body, dict) else None
    if isinstance(root, dict):
        return root
    return {"code": str(getattr(error.error, "code", "") or ""), "message": str(error.message or "")}


def loaded_job(plan: Plan[dict[str, Any], AzureMLTarget]) -> Any:
    """The rendered YAML through the SDK's own loader; secrets are set on the entity, never on disk."""
    from azure.ai.ml import load_job

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job.yml"
        path.write_text(plan.documents["job.yml"])
        job: Any = load_job(source=path)
    job.environment_variables = plan.reveal(dict(job.environment_variables))
    return job


def warn(warning: str, progress: Progress | None) -> None:
    """A warning at launch, or while metrics are read: on the progress when there is one, else as a Python warning
    (at launch it names the code that called ``launch``: warn, submit, the hook, ``Backend.launch``, then it)."""
    if progress:
        progress.step(f"warning: {warning}")
    else:
        warnings.warn(warning, stacklevel=5)
