"""Learning from finished runs: a run's measured step time is kept for the next estimate of the same job.

What is measured and how it is stored is the catalog's (:mod:`cloudddp.catalog.stepstore`); this is the policy
of when: once per run, after it has ended and its backend's bill is final.
"""

from __future__ import annotations

from typing import Any

from cloudddp.backends.base import Backend
from cloudddp.backends.records import LaunchInfo
from cloudddp.catalog.stepstore import keep_measured


def learn(backend: Backend[Any], run_id: str) -> dict[str, Any] | None:
    """Keep the step time of finished run ``run_id`` for the next estimate (once per run; what was learned, or why
    nothing, goes into the run record's info as ``measured``). Needs the key the plan had at launch."""
    record = backend.records.get(run_id)
    if record is None or "measured" in record.info:  # learned already (what, or why nothing)
        return None
    key = LaunchInfo.from_fields(record.info).step_key
    bill = backend.bill(run_id) if key else None
    if bill is None or not bill.final:
        return None
    info = keep_measured(run_id, key, bill, backend.metrics(run_id))
    backend.records.update(run_id, info={"measured": info})
    return info
