"""Where a backend's sizes come from: the one catalog type the backend contract names (kept apart, so the contract
does not import the catalog's selection, cost model or measured step times)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SizeTarget:
    """Where a backend's sizes come from, and what the spec says about them."""

    cloud: str
    """A cloud of the catalog ("azure", "aws"); the catalog checks it."""
    named: str | None
    """The size the spec names, if any."""
    field: str
    """The spec field that names it, for messages (e.g. ``azureml.vm_size``)."""
    idle_s: float | None = None
    """Time the cloud bills after the job ends (an autoscaling cluster's scale-down delay)."""
    region: str | None = None
    """Where the job runs, when the spec or the environment says (a price from another region is marked)."""
