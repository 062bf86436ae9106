"""A run's checkpoints handed from one backend's storage to another's, when the run moves (``-b auto``'s failover,
``limits.recover_to: any_backend``, ``submit --resume-from``): the copy itself is :mod:`cloudddp.runs.carry`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cloudddp.backends.base import Backend, Progress
from cloudddp.backends.stores import location_of
from cloudddp.runs.carry import carry


def carried_to(
    source: Backend[Any],
    source_target: Mapping[str, Any],
    dest: Backend[Any],
    dest_target: Mapping[str, Any],
    progress: Progress | None = None,
) -> str:
    """Carry the latest checkpoint from ``source``'s folder (a run's ``target``) to ``dest``'s (a plan's); what was
    carried, in words for the run's history ("" when either side keeps no checkpoints, or both name one folder)."""
    here, there = location_of(source_target), location_of(dest_target)
    if here is None or there is None or (source.name == dest.name and here == there):
        return ""
    carried = carry(source.checkpoint_store(source_target), dest.checkpoint_store(dest_target), progress)
    return f"carried {carried.summary()} from {here} to {there}"
