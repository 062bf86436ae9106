"""The preflight's quota check: the account's Service Quotas for the job's instance type.

SageMaker's quotas are named per instance type and kind of use: ``ml.p4d.24xlarge for training job
usage`` (on demand) and ``ml.p4d.24xlarge for spot training job usage`` (managed spot). The list has
hundreds of entries, paged (``NextToken``): every page is read. A lookup that fails is a warning in the
preflight (``ok`` None, with the reason), never silence and never a refusal.
"""

from __future__ import annotations

from typing import Any

from cloudddp.backends.checks import Check

FIX = "request an increase in the Service Quotas console (Amazon SageMaker, the quota named above)"


def quota_name(instance_type: str, spot: bool) -> str:
    return f"{instance_type} for {'spot ' if spot else ''}training job usage"


def quota_check(client: Any, instance_type: str, count: int, spot: bool) -> Check:
    """The check for ``count`` instances of ``instance_type`` (a service-quotas client)."""
    wanted = quota_name(instance_type, spot)
    name = f"quota '{wanted}'"
    try:
        pages = client.get_paginator("list_service_quotas").paginate(ServiceCode="sagemaker")
        quota = next((q for page in pages for q in page.get("Quotas", []) if q.get("QuotaName") == wanted), None)
    except Exception as e:  # noqa: BLE001 - any failure to read quotas is a warning, not a refusal
        return Check(name, None, f"warning: could not read Service Quotas: {str(e).splitlines()[0]}")
    if quota is None:
        return Check(name, None, "warning: no such quota listed for this account and region")
    return Check(name, quota["Value"] >= count, f"{quota['Value']:g} allowed, the job needs {count}", fix=FIX)
