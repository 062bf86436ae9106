"""The sizes a recovery moves to when one size keeps failing for capacity (``limits.recover_to: next_size``).

The ranking is the plan's own: every catalog size that fits the job, cheapest whole job first, as
``cloudddp plan --explain`` lists them (a size named in the spec is set aside, so the ranking is the one
cloudddp would have chosen from). The next sizes are rendered when the job is submitted, with the same spec
and only the size field changed, so the watcher launches them later without the spec (which may hold a
literal secret) and without re-reading the user's files; whether a size can actually be had (quota, the
size offered in the region) is left to the preflight checks at the moment the watcher moves on.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .backends.base import Backend
from .errors import UserError
from .spec import JobSpec
from .specload import spec_from_dict, spec_to_data

NEXT_SIZES = 3
"""How many sizes after the first are rendered for a recovery to move to."""


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


def ranked_sizes(backend: Backend[Any], spec: JobSpec) -> tuple[str | None, list[str]]:
    """The size ``spec`` runs on at ``backend`` and the other sizes that fit it, best first; (None, []) for a
    backend that chooses no size."""
    from .catalog.select import select
    from .sizing import requirements_for

    target = backend.size_target(spec)
    if target is None or spec.resources.gpus_per_node == 0:
        return None, []
    ranking = select(requirements_for(spec, dataclasses.replace(target, named=None))).candidates
    fits = [c.sku.size for c in ranking if c.ok]
    current = target.named or (fits[0] if fits else None)
    return current, [size for size in fits if size != current]


def plan_fallback(backend: Backend[Any], spec: JobSpec) -> Fallback:
    """Render ``spec`` at each of the next :data:`NEXT_SIZES` sizes of its ranking (nothing when ``spec``
    keeps recovering on one size)."""
    current, others = ranked_sizes(backend, spec)
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


def describe(backend: Backend[Any], spec: JobSpec) -> tuple[list[str], list[str]]:
    """What a plan says about ``limits.recover_to`` (its decisions, its warnings): where a recovery would move,
    or why it cannot."""
    if spec.limits.recover_to != "next_size":
        return [], []
    current, others = ranked_sizes(backend, spec)
    if current is None:
        return [], [f"limits.recover_to: next_size has no effect on the {backend.name} backend: it chooses no size"]
    if not others:
        return [], [f"limits.recover_to: next_size: no other size fits this job; a recovery stays on {current}"]
    nxt = ", then ".join(others[:NEXT_SIZES])
    return [
        f"recovery: after {failures(spec.limits.capacity_tries)} on {current} an attempt moves to {nxt} "
        "(the first that passes the preflight checks)"
    ], []


def failures(count: int) -> str:
    """ "1 capacity failure", "2 capacity failures": for messages."""
    return "1 capacity failure" if count == 1 else f"{count} capacity failures"
