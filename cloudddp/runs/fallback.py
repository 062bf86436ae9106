"""The sizes a recovery moves to when one size keeps failing for capacity (``limits.recover_to: next_size``).

The ranking is the plan's own: every catalog size that fits the job, cheapest whole job first, as
``cloudddp plan --explain`` lists them (a size named in the spec is set aside, so the ranking is the one
cloudddp would have chosen from). The next sizes are rendered when the job is submitted, with the same spec
and only the size field changed, so the watcher launches them later without the spec (which may hold a
literal secret) and without re-reading the user's files; whether a size can actually be had (quota, the
size offered in the region) is left to the preflight checks at the moment the watcher moves on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cloudddp.backends.base import Backend
from cloudddp.backends.plugins import spec_from_dict
from cloudddp.catalog.ranking import NEXT_SIZES, ranked_sizes
from cloudddp.errors import UserError
from cloudddp.spec.load import spec_to_data
from cloudddp.spec.model import JobSpec


@dataclass
class Fallback:
    """The first attempt's size and the plans (as saved state) a recovery may move to, in rank order."""

    size: str | None
    plans: list[dict[str, Any]] = field(default_factory=list)
    """``{"size": ..., "plan": Plan.to_state()}`` for each next size."""
    skipped: list[str] = field(default_factory=list)
    """Sizes of the ranking that could not be rendered for this job, with the reason."""

    @property
    def sizes(self) -> list[str]:
        return [p["size"] for p in self.plans]


def plan_fallback(backend: Backend[Any], spec: JobSpec) -> Fallback:
    """Render ``spec`` at each of the next :data:`NEXT_SIZES` sizes of its ranking (nothing when ``spec``
    keeps recovering on one size)."""
    current, others = ranked_sizes(backend.size_target(spec), spec)
    fallback = Fallback(current)
    if spec.limits.recover_to != "next_size" or current is None:
        return fallback
    target = backend.size_target(spec)
    assert target is not None
    data = spec_to_data(spec)
    for size in others:
        if len(fallback.plans) == NEXT_SIZES:
            break
        try:
            moved = spec_from_dict(data, base_dir=spec.base_dir, overrides=[f"{target.field}={size}"])
            fallback.plans.append({"size": size, "plan": backend.render(moved).to_state()})
        except UserError as e:
            fallback.skipped.append(f"{size}: {str(e).splitlines()[0]}")
    return fallback
