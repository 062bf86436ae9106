"""Why an Azure ML job failed, from the error its run history reports (what ``az ml job stream`` prints).

A failed job's run details carry ``error.error``: a ``code`` (Azure's category: ``UserError``,
``SystemError``, ``ServiceError``, ...), a ``message`` that names the kind of failure
(``AzureMLCompute job failed.\\nPreemptionError: Nodes of this job got pre-empted. ...``), and nested
``innerError`` codes and ``details``. The category alone is not the cause: Azure files a preempted
low-priority job as a ``UserError``. So the kinds named anywhere in the error decide, in this order:

0. the script's own failure named as such (``ExecutionFailed``, ``UserProcessFailed``): first, because the
   message then goes on with the script's own output, which may say anything ("evicted", "quota");
1. preemption (``PreemptionError``, "pre-empted", an eviction): the capacity was taken back;
2. capacity (allocation failures, quota reached, a size not available): no nodes for the job now;
3. infrastructure (a node failed or became unusable, the service's own internal error);
4. limit (the job ran past ``limits.timeout``);
5. the job's own code, in other words (a non-zero exit of the command);
6. then the category: ``SystemError``/``ServiceError``/``InternalServerError`` is infrastructure,
   ``UserError`` the job's own; anything else is unknown (never recovered).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from cloudddp.backends.status import Cause

_KINDS: tuple[tuple[Cause, re.Pattern[str]], ...] = tuple(
    (cause, re.compile(pattern, re.IGNORECASE))
    for cause, pattern in (
        (Cause.USER_ERROR, r"\bExecutionFailed\b|\bUserProcessFailed\b"),
        (Cause.PREEMPTED, r"PreemptionError|pre-?empt(ed|ion)|\bevict(ed|ion)\b"),
        (
            Cause.CAPACITY,
            r"AllocationFailed|AllocationTimedout|OverconstrainedAllocationRequest|ZonalAllocationFailed|"
            r"InsufficientCapacity|QuotaExceeded|QuotaReached|CoreQuota|SkuNotAvailable|"
            r"not enough (capacity|quota)|out of capacity",
        ),
        (
            Cause.INFRASTRUCTURE,
            r"NodeFailure|NodeUnusable|NodeNotReady|NodeLost|node (failed|was lost|became unusable)|"
            r"InfrastructureError|DiskFailure",
        ),
        (
            Cause.LIMIT,
            r"JobTimeout|MaxWallClockTimeExpiry|max(imum)?[_ ]run[_ ]duration|exceeded (the|its) (time ?limit|"
            r"timeout)",
        ),
        (
            Cause.USER_ERROR,
            r"non-zero exit|exit_?codes?:? *[1-9]|exited with "
            r"(status|exit) code|Submitted script failed",
        ),
    )
)
_CATEGORIES = {
    "systemerror": Cause.INFRASTRUCTURE,
    "serviceerror": Cause.INFRASTRUCTURE,
    "internalservererror": Cause.INFRASTRUCTURE,
    "usererror": Cause.USER_ERROR,
}


def _texts(error: dict[str, Any]) -> Iterator[str]:
    """Every code and message in an error, its inner errors and its details."""
    for key in ("code", "message"):
        if isinstance(error.get(key), str):
            yield error[key]
    inner = error.get("innerError") or error.get("inner_error")
    while isinstance(inner, dict):
        if isinstance(inner.get("code"), str):
            yield inner["code"]
        inner = inner.get("innerError") or inner.get("inner_error")
    for detail in error.get("details") or []:
        if isinstance(detail, dict):
            yield from _texts(detail)


def root_error(details: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``error.error`` object of a run's details (the error response's root error), if it has one."""
    response = (details or {}).get("error")
    if not isinstance(response, dict):
        return None
    root = response.get("error", response)
    return root if isinstance(root, dict) else None


def failure_cause(error: dict[str, Any] | None) -> Cause:
    """Why a job whose root error is ``error`` failed (see the module's docstring for the order)."""
    if not error:
        return Cause.UNKNOWN
    texts = list(_texts(error))
    for cause, pattern in _KINDS:
        if any(pattern.search(text) for text in texts):
            return cause
    return _CATEGORIES.get(str(error.get("code", "")).lower(), Cause.UNKNOWN)


def failure_message(error: dict[str, Any] | None, limit: int = 400) -> str:
    """The error as one line: its message with the whitespace folded, else its code."""
    if not error:
        return ""
    text = " ".join(str(error.get("message") or error.get("code") or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
