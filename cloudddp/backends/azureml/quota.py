"""AmlCompute quota as Azure ML counts it, from the region's usage list (``compute.list_usage``).

Two pools, not one (how-to-manage-quotas): a dedicated node counts against its VM family's
``Standard <X> Family Cluster Dedicated vCPUs`` and the regional ``Total Cluster Dedicated Regional vCPUs``;
a low-priority (spot) node counts against one regional ``Total Cluster LowPriority Regional vCPUs``, whatever
its family (the per-family LowPriority rows read ``limit: -1``, no limit of their own). Specialized families
(NC_A100_v4, …) start at zero dedicated cores, so a spot job must not be judged by the family's dedicated row.

The service names usages in long form (the REST example ``Usage/list.json``: "Standard DSv2 Family Cluster
Dedicated vCPUs", with ids ending ``Standard_DSv2_Family_Cluster_Dedicated_vCPUs``), while a VM size's
``family`` reads ``standardDSv2Family``; names are compared after reducing both to the family's core
("DSv2"). The subscription-level rows count, and so does the workspace's own row for the family where it is
tighter (a workspace may be given less than the subscription has: Azure ML's workspace-level quota); other
workspaces' and per-cluster rows do not. A lookup that matches nothing is a check that could not be made
(``ok=None``) naming what was looked for, never a pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from cloudddp.backends.checks import Check

QUOTA_FIX = "request more quota in the Azure portal (Azure Machine Learning > Quotas), or use fewer or smaller nodes"
_LONG = re.compile(r"^standard\s*(?P<core>.+?)\s*family\s*cluster\s*(?P<pool>dedicated|lowpriority)\s*vcpus$", re.I)
REGIONAL = {
    "dedicated": "Total Cluster Dedicated Regional vCPUs",
    "lowpriority": "Total Cluster LowPriority Regional vCPUs",
}


@dataclass(frozen=True)
class Usage:
    """One row of the usage list: its name (``name.value``), its ARM type and id, what is used and allowed."""

    name: str
    type: str
    id: str
    current: int
    limit: int

    @property
    def subscription_level(self) -> bool:
        """The region's row, not a workspace's or a cluster's copy of it."""
        return "/workspaces/" not in self.id.lower() and "/workspace/" not in self.type.lower()

    def of_workspace(self, workspace: str) -> bool:
        """The row of workspace ``workspace`` itself (not one of its clusters')."""
        ident = self.id.lower()
        return f"/workspaces/{workspace.lower()}/usages/" in ident and "/computes/" not in ident

    @property
    def free(self) -> float:
        return float("inf") if self.limit < 0 else self.limit - self.current


def family_core(family: str) -> str:
    """``standardNDASv4_A100Family`` -> ``ndasv4a100``: the part both name forms share, for comparing."""
    core = re.sub(r"^standard", "", family.strip(), flags=re.I)
    core = re.sub(r"family$", "", core, flags=re.I)
    return re.sub(r"[\s_]", "", core).lower()


def long_name(family: str, pool: str) -> str:
    """The name the service gives the family's row: ``Standard NDASv4_A100 Family Cluster Dedicated vCPUs``."""
    core = re.sub(r"family$", "", re.sub(r"^standard", "", family.strip(), flags=re.I), flags=re.I)
    return f"Standard {core} Family Cluster {'LowPriority' if pool == 'lowpriority' else 'Dedicated'} vCPUs"


def family_row(usages: list[Usage], family: str, pool: str, workspace: str | None = None) -> Usage | None:
    """The family's subscription-level row for ``pool`` (``dedicated``/``lowpriority``), or workspace
    ``workspace``'s own row, in the long form or as the bare family name (some api versions and the older rig
    answered so; a bare name is the dedicated row)."""
    want = family_core(family)
    for usage in usages:
        if not (usage.of_workspace(workspace) if workspace else usage.subscription_level):
            continue
        match = _LONG.match(usage.name.strip()) or _LONG.match(usage.id.rsplit("/", 1)[-1].replace("_", " "))
        if match and match["pool"].lower() == pool and re.sub(r"[\s_]", "", match["core"]).lower() == want:
            return usage
        if not match and pool == "dedicated" and family_core(usage.name) == want and "family" in usage.name.lower():
            return usage
    return None


def regional_row(usages: list[Usage], pool: str) -> Usage | None:
    """``Total Cluster Dedicated Regional vCPUs`` or ``Total Cluster LowPriority Regional vCPUs``."""
    kind = "lowprioritycores" if pool == "lowpriority" else "dedicatedcores"
    wanted = REGIONAL[pool].lower()
    for usage in usages:
        if usage.subscription_level and (usage.name.strip().lower() == wanted or kind in usage.type.lower()):
            return usage
    return None


def _check(label: str, usage: Usage, needed: int) -> Check:
    if usage.limit < 0:  # the service's "no limit of its own" (per-family LowPriority rows)
        return Check(label, True, f"{usage.name}: no limit of its own, the job needs {needed}")
    free = usage.limit - usage.current
    return Check(
        label,
        free >= needed,
        f"{usage.name}: {free} vCPUs free ({usage.current} of {usage.limit} used), the job needs {needed}",
        fix=QUOTA_FIX,
    )


def quota_checks(
    usages: list[Usage], family: str, vcpus_per_node: int, nodes: int, *, spot: bool, workspace: str | None = None
) -> list[Check]:
    """The checks for ``nodes`` nodes of ``vcpus_per_node`` vCPUs of ``family`` on dedicated or spot nodes; with
    ``workspace``, its own row for the family too where it leaves less than the subscription's."""
    checks = _pool_checks(usages, family, vcpus_per_node * nodes, spot=spot)
    pool = "lowpriority" if spot else "dedicated"
    own = family_row(usages, family, pool, workspace) if workspace else None
    region = family_row(usages, family, pool)
    if own is not None and own.limit >= 0 and (region is None or own.free < region.free):
        checks.append(_check(f"workspace {workspace}'s quota for {family}", own, vcpus_per_node * nodes))
    return checks


def _pool_checks(usages: list[Usage], family: str, needed: int, *, spot: bool) -> list[Check]:
    checks: list[Check] = []
    if spot:
        regional = regional_row(usages, "lowpriority")
        label = "low-priority quota (regional)"
        if regional is None:
            checks.append(Check(label, None, f"no usage named '{REGIONAL['lowpriority']}' in the region's usage list"))
        else:
            checks.append(_check(label, regional, needed))
        row = family_row(usages, family, "lowpriority")
        if row is not None and row.limit >= 0:
            checks.append(_check(f"low-priority quota for {family}", row, needed))
        return checks
    row = family_row(usages, family, "dedicated")
    label = f"quota for {family}"
    if row is None:
        checks.append(
            Check(
                label,
                None,
                f"no usage named '{long_name(family, 'dedicated')}' (or '{family}') in the region's usage list",
            )
        )
    else:
        checks.append(_check(label, row, needed))
    regional = regional_row(usages, "dedicated")
    if regional is not None:
        checks.append(_check("dedicated quota (regional)", regional, needed))
    return checks


def usage_of(entity: Any) -> Usage:
    """An azure-ai-ml ``Usage`` as a row. azure-ai-ml 1.35 leaves ``current_value`` None and keeps the value under
    the REST key ``currentValue`` (as on VmSize); either is read. ``name`` is a dict or an object."""
    fields = vars(entity)
    name = fields.get("name") or {}
    value = name.get("value") if isinstance(name, dict) else getattr(name, "value", None)
    current = fields.get("current_value")
    current = fields.get("currentValue") if current is None else current
    return Usage(
        name=str(value or ""),
        type=str(fields.get("type") or ""),
        id=str(fields.get("id") or ""),
        current=int(current or 0),
        limit=int(fields.get("limit") if fields.get("limit") is not None else 0),
    )
