"""What Azure ML itself refuses, checked at render so the refusal says why before anything is sent.

- Cluster names: 3 to 24 characters, letters, digits and ``-``, starting with a letter, and a ``-`` followed by a
  letter somewhere after it (the service's rule for compute names: ``gpu-2`` and ``gpu-`` are refused); the names
  cloudddp suggests (``<name>-lowpri``, ``<name>-dedicated``) are cut to fit it.
- Job lifetime: a job runs at most 21 days, and at most 7 days on low-priority nodes (Azure ML's service limits),
  so a ``limits.max_runtime`` beyond them would be cut short by the service, not by cloudddp.
"""

from __future__ import annotations

import re

from cloudddp.errors import UserError

CLUSTER_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{2,23}$")
CLUSTER_RULE = "3 to 24 characters, letters, digits and '-', starting with a letter, a '-' followed by a letter later"
DAY = 24 * 3600
MAX_DAYS = 21
MAX_LOW_PRIORITY_DAYS = 7


def check_cluster_name(name: str, field: str = "azureml.compute") -> None:
    """A UserError naming the rule when Azure ML would refuse ``name`` as a compute name."""
    if valid_cluster_name(name):
        return
    raise UserError(
        f"{field}: {name!r} ({len(name)} characters) is not a name Azure ML accepts for a cluster: {CLUSTER_RULE}",
        hint=f"set {field} to a name such as {suggest_cluster(name, '')!r}",
    )


def valid_cluster_name(name: str) -> bool:
    """Whether Azure ML accepts ``name`` for a cluster: :data:`CLUSTER_RULE`."""
    return CLUSTER_NAME.match(name) is not None and (
        "-" not in name or re.search("[A-Za-z]", name.rsplit("-", 1)[1]) is not None
    )


def suggest_cluster(name: str, suffix: str) -> str:
    """``name`` + ``suffix`` made to fit the rule: other characters become ``-``, a letter in front when it starts
    with none, the base cut so the whole stays within 24 characters."""
    base = re.sub(r"[^A-Za-z0-9-]", "-", name) or "cluster"
    if not base[0].isalpha():
        base = "c" + base
    base = base[: 24 - len(suffix)].rstrip("-")
    name = (base + suffix).ljust(3, "0")
    return name if valid_cluster_name(name) else name.replace("-", "")


def check_runtime(seconds: int, *, spot: bool) -> None:
    """A UserError when ``limits.max_runtime`` is beyond what Azure ML lets a job run (7 days on low priority)."""
    days = MAX_LOW_PRIORITY_DAYS if spot else MAX_DAYS
    if seconds <= days * DAY:
        return
    where = "on low-priority nodes (resources.spot: true)" if spot else "on Azure ML"
    raise UserError(
        f"limits.max_runtime: {seconds / DAY:.3g} days is over the {days}-day limit for a job {where}: "
        "the service would end the job first",
        hint=f"set limits.max_runtime to {days}d or less and checkpoint (a resubmit resumes from the checkpoints)"
        + ("; or run on dedicated nodes (resources.spot: false), up to 21 days" if spot else ""),
    )
