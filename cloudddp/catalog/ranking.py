"""The sizes a job could run on, best first: what ``limits.recover_to: next_size`` moves a recovery to.

The ranking is the catalog's selection for the job's requirements with the size the spec names left open;
the size the spec runs on comes first and the others follow in rank order. A plan names them at render
(:func:`next_size_notes`); the runner renders the plans for them at submit (:mod:`cloudddp.runs.fallback`).
"""

from __future__ import annotations

import dataclasses

from cloudddp.catalog.select import select
from cloudddp.catalog.sizing import requirements_for
from cloudddp.catalog.target import SizeTarget
from cloudddp.spec.model import JobSpec

NEXT_SIZES = 3
"""How many sizes after the first are rendered for a recovery to move to."""


def ranked_sizes(target: SizeTarget | None, spec: JobSpec) -> tuple[str | None, list[str]]:
    """The size ``spec`` runs on at a backend whose sizes are ``target`` and the other sizes that fit it, best
    first; (None, []) for a backend that chooses no size (``target`` None) or a job without GPUs."""
    if target is None or spec.resources.gpus_per_node == 0:
        return None, []
    ranking = select(requirements_for(spec, dataclasses.replace(target, named=None))).candidates
    fits = [c.sku.size for c in ranking if c.ok]
    current = target.named or (fits[0] if fits else None)
    return current, [size for size in fits if size != current]


def next_size_notes(backend: str, target: SizeTarget | None, spec: JobSpec) -> tuple[list[str], list[str]]:
    """What a plan says about ``limits.recover_to`` (its decisions, its warnings): where a recovery would move,
    or why it cannot. Nothing unless the spec asks for ``next_size``."""
    if spec.limits.recover_to != "next_size":
        return [], []
    current, others = ranked_sizes(target, spec)
    if current is None:
        return [], [f"limits.recover_to: next_size has no effect on the {backend} backend: it chooses no size"]
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
