"""What the run record keeps about a SageMaker run: the typed form of the info launch records, read back by status,
logs, cancel and the bill.

The run id is the training job's name; the record adds where the job is. The base class and the runner keep
their own keys in the same info (metrics, estimate, target, the recovery chain, ...):
:meth:`~cloudddp.plan.JsonDataclass.from_fields` reads this record from among them.
"""

from __future__ import annotations

from dataclasses import dataclass

from cloudddp.plan import JsonDataclass


@dataclass(frozen=True, kw_only=True)
class SageMakerRunInfo(JsonDataclass):
    region: str | None = None
    """The region the training job was created in: every later call goes there (None: a record without it, a job
    in the region the environment names)."""
    uploaded_bytes: tuple[int, ...] = ()
    """Bytes each of the plan's uploads sent, in the plan's order (0: the snapshot was in S3 already)."""
