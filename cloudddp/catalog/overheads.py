"""What a cloud bills around the training itself: start-up, checkpoints, shutdown, idle nodes.

The figures and the billing rules live in ``cloudddp/data/overheads.csv``; each row says whether it is
documented by the provider, reported by a third party, or an assumption of ours.
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass, replace

from cloudddp.paths import data_text

_NUMBERS = (
    "provision_s",
    "provision_billed",
    "image_gb",
    "pull_gbps",
    "download_gbps",
    "checkpoint_gbps",
    "upload_gbps",
    "teardown_s",
    "idle_s",
    "billing_increment_s",
)


@dataclass(frozen=True)
class Overheads:
    """A cloud's time and billing around a job's training (``overheads.csv``): provisioning, image pull, data
    download, checkpoint upload, teardown, idle time and the billing increment."""

    cloud: str
    provision_s: float  # request to nodes ready
    provision_billed: bool  # False on SageMaker: billing starts at TrainingStartTime
    image_gb: float
    pull_gbps: float
    download_gbps: float
    checkpoint_gbps: float
    upload_gbps: float
    teardown_s: float
    idle_s: float  # per node, billed after the job (Azure ML's idle time before scale-down)
    billing_increment_s: float
    rules: tuple[str, ...] = ()  # the billing rules, in words, with their sources

    def with_idle(self, idle_s: float | None) -> Overheads:
        return self if idle_s is None else replace(self, idle_s=float(idle_s))


@functools.cache
def _rows() -> tuple[dict[str, str], ...]:
    text = data_text("overheads.csv")
    return tuple(csv.DictReader(text.splitlines()))


def overheads(cloud: str) -> Overheads | None:
    """The overheads of ``cloud``, or None when the data has none for it."""
    rows = {r["item"]: r for r in _rows() if r["cloud"] == cloud}
    if not rows:
        return None
    v = {k: float(rows[k]["value"]) for k in _NUMBERS}
    return Overheads(
        cloud=cloud,
        provision_s=v["provision_s"],
        provision_billed=bool(v["provision_billed"]),
        image_gb=v["image_gb"],
        pull_gbps=v["pull_gbps"],
        download_gbps=v["download_gbps"],
        checkpoint_gbps=v["checkpoint_gbps"],
        upload_gbps=v["upload_gbps"],
        teardown_s=v["teardown_s"],
        idle_s=v["idle_s"],
        billing_increment_s=v["billing_increment_s"],
        rules=tuple(f"{r['item']}: {r['source']}" for r in rows.values() if r["unit"] == "-"),
    )
