"""What the watchers inside a running run's ranks said, in its status: the straggler the watch named last
(:mod:`cloudddp.injob.pace`) and the interconnect pre-flight's plan against reality
(:mod:`cloudddp.injob.interconnect`), read from the run's log.

Only where the log is files this machine or its cluster holds (a backend without a cloud: local, Slurm), and at
most once every :data:`EVERY` seconds per run in one process: whoever waits for a run asks its status every
second, and a long run's log is long. A cloud's log is an API's pages, so there the lines stay in the log and the
metrics (``straggler_rank``, ``straggler_ratio``, ``interconnect_busbw_*``) and the status does not read them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable

from cloudddp.backends.status import LogLine, RunState, RunStatus
from cloudddp.errors import CloudDDPError
from cloudddp.injob import interconnect, pace

STRAGGLER = "straggler"
"""The key of ``RunStatus.details`` that names the straggler(s) of a running run."""
INTERCONNECT = "interconnect"
"""The key of ``RunStatus.details`` with the pre-flight's result: the fabric the plan chose for, what NCCL uses."""
EVERY = 2.0
_read: dict[str, tuple[float, dict[str, str]]] = {}


def said(lines: Iterable[LogLine]) -> dict[str, str]:
    """What global rank 0's watchers said last in ``lines``, each without its tag: the straggler (none when its
    last word was that every rank caught up) and the pre-flight's result."""
    found: dict[str, str] = {}
    for line in lines:
        if line.rank not in (0, None):
            continue
        for key, tag in ((STRAGGLER, pace.TAG), (INTERCONNECT, interconnect.TAG)):
            if tag in line.text:
                found[key] = line.text[line.text.index(tag) + len(tag) :].strip()
    if found.get(STRAGGLER, "").startswith(pace.CAUGHT_UP):
        del found[STRAGGLER]
    return found


def noted(
    status: RunStatus, lines: Callable[[], Iterable[LogLine]], clock: Callable[[], float] = time.monotonic
) -> RunStatus:
    """``status`` with what the watchers said in ``details``, for a running run whose log ``lines`` gives; as it is
    when they said nothing or the log cannot be read now."""
    if status.state is not RunState.RUNNING:
        return status
    last = _read.get(status.run_id)
    if last is None or clock() - last[0] >= EVERY:
        try:
            last = _read[status.run_id] = (clock(), said(lines()))
        except CloudDDPError:
            return status
    return dataclasses.replace(status, details={**status.details, **last[1]}) if last[1] else status
