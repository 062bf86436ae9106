"""A run's checkpoints handed from one backend's storage to another's, when the run moves (``-b auto``'s failover,
``limits.recover_to: any_backend``, ``submit --resume-from``): the copy itself is :mod:`cloudddp.runs.carry`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cloudddp.backends.base import Backend, Progress, mapped_errors
from cloudddp.backends.stores import location_of
from cloudddp.errors import CloudDDPError
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
    try:
        with mapped_errors(source), mapped_errors(dest):
            carried = carry(source.checkpoint_store(source_target), dest.checkpoint_store(dest_target), progress)
    except CloudDDPError:
        raise
    except Exception as e:  # a storage error neither backend maps: the move stops, said, never a dead watcher
        raise CloudDDPError(f"the checkpoints could not be carried from {here} to {there}: {e}") from e
    return carried.summary()
