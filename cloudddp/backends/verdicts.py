"""What the programs in the job concluded about a run that failed, as every backend reads it from the run's log:
the hang doctor's verdict (:mod:`cloudddp.injob.hang`: the culprit, and the grouped stacks after it; cause
``hang``) and the interconnect pre-flight's refusal (:mod:`cloudddp.injob.interconnect`: a size chosen for
InfiniBand/EFA running over sockets; cause ``infrastructure``). :class:`KeptVerdicts` reads a cloud job's log for
them once and keeps what it found in the run's record.

They are printed in the job, so every backend's log carries the same lines, each perhaps behind a launcher's
prefix (torchrun's ``[rank2]:``, SageMaker's ``[1,mpirank:2,algo-1]<stderr>:``, a timestamp). A hang's
``culprits`` are the rank(s) at fault; ``host`` is the host the first of them ran on (what a Slurm recovery
leaves out).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from cloudddp.backends.records import RunRecords
from cloudddp.backends.status import Cause, LogLine, RunStatus
from cloudddp.injob.culprit import TAG
from cloudddp.injob.interconnect import FAILED
from cloudddp.injob.interconnect import TAG as FABRIC_TAG

STACK_LINES = 40
"""The most lines of the grouped stacks a status keeps."""
_HEADING = "cloudddp: every rank's stack"
_STACK_LINE = re.compile(r"^(ranks? [\d, ]+.*most recent call first:|  +\S)")
"""A line of the grouped stacks (:func:`cloudddp.injob.culprit.render`): a group's heading or a frame."""
_CULPRIT = re.compile(r"rank (\d+)(?: on node (\S+))?(?: \(([^)]*)\))?: ")


@dataclass(frozen=True)
class HangVerdict:
    message: str
    """The verdict without its tag: who is at fault and where, who waits in what."""
    culprits: list[int] = field(default_factory=list)
    node: str = ""
    host: str = ""
    stacks: list[str] = field(default_factory=list)

    def failure(self) -> dict[str, Any]:
        """What a status records of it (``details["failure"]``)."""
        return {
            "hang": self.message,
            "culprits": self.culprits,
            "culprit_node": self.node,
            "culprit_host": self.host,
            "log_tail": self.stacks[:STACK_LINES],
        }


def fabric_refusal_in(lines: Iterable[str]) -> dict[str, Any] | None:
    """The interconnect pre-flight's refusal in ``lines`` (its line, and the per-rank NCCL lines that prove it),
    as a status records it; None without."""
    found: dict[str, Any] | None = None
    for raw in lines:
        line = raw.rstrip("\n")
        if FAILED in line:
            found = {"interconnect": line[line.index(FAILED) + len(FAILED) :].strip(), "log_tail": []}
        elif found is not None and FABRIC_TAG in line and len(found["log_tail"]) < STACK_LINES:
            found["log_tail"].append(line[line.index(FABRIC_TAG) + len(FABRIC_TAG) :].strip())
    return found


def concluded(lines: Iterable[str]) -> dict[str, Any] | None:
    """What the job concluded in ``lines``: a hang's verdict (:meth:`HangVerdict.failure`) or the pre-flight's
    refusal (:func:`fabric_refusal_in`), as a status records it; None when it concluded neither."""
    kept = list(lines)
    refusal = fabric_refusal_in(kept)
    if refusal is not None:
        return refusal
    verdict = verdict_in(kept)
    return verdict.failure() if verdict is not None else None


def cause_of(failure: dict[str, Any]) -> tuple[Cause, str]:
    """The cause and the message of a run whose job concluded ``failure`` (:func:`concluded`)."""
    if "interconnect" in failure:
        return Cause.INFRASTRUCTURE, f"interconnect: {failure['interconnect']}"
    return Cause.HANG, f"hang: {failure['hang']}"


def verdict_in(lines: Iterable[str]) -> HangVerdict | None:
    """The last verdict in ``lines`` (a run's log, oldest first), with the stacks printed right after it (the lines
    with the verdict's own prefix, up to the first that is not a stack's); None without."""
    found: HangVerdict | None = None
    prefix = ""
    stacks: list[str] = []
    reading = False
    for raw in lines:
        line = raw.rstrip("\n")
        if TAG in line:
            prefix = line[: line.index(TAG)]
            found, stacks, reading = _parse(line[line.index(TAG) + len(TAG) :].strip()), [], True
        elif reading and line.startswith(prefix) and not line.startswith(prefix + _HEADING):
            reading = bool(_STACK_LINE.match(line[len(prefix) :]))
            if reading:
                stacks.append(line[len(prefix) :])
    if found is None:
        return None
    return HangVerdict(found.message, found.culprits, found.node, found.host, stacks[:STACK_LINES])


def _parse(message: str) -> HangVerdict:
    """The culprits of a verdict's parts (``rank 1 on node 0 (host): where``, ``ranks 3, 4 gave no stack``); the
    parts that say who waits are not."""
    culprits: list[int] = []
    node = host = ""
    for part in message.split("; "):
        if "waiting in" in part:
            continue
        if "gave no stack" in part:
            culprits += [int(r) for r in re.findall(r"\d+", part.split("gave no stack")[0])]
        elif match := _CULPRIT.match(part):
            culprits.append(int(match.group(1)))
            if not node and not host:
                node, host = match.group(2) or "", match.group(3) or ""
    return HangVerdict(message, culprits, node, host)


class KeptVerdicts:
    """What the job concluded (:func:`concluded`), from the log of each failed job, read once: what was found, or
    that nothing was, is kept in the run's record, so a status asked again, in this process or another, reads no
    log (a job without a record keeps it in memory)."""

    KEY = "hang_verdict"

    def __init__(self) -> None:
        self._known: dict[str, dict[str, Any]] = {}

    def of(
        self,
        records: RunRecords,
        run_id: str,
        lines: Callable[[], Iterable[LogLine]],
        unreadable: tuple[type[Exception], ...],
        *,
        whole: bool = True,
    ) -> dict[str, Any] | None:
        """What the job ``run_id`` concluded (:func:`concluded`), None when nothing. ``lines`` (the job's log) is
        read until something is found or, once the log is ``whole``, nothing is; a log that raises one of
        ``unreadable`` is tried again at the next status."""
        record = records.get(run_id)
        known = record.info.get(self.KEY) if record is not None else self._known.get(run_id)
        if known is None:
            try:  # each source's lines behind their own prefix: a rank's stacks are told from the others' lines
                known = concluded(f"{line.source}| {line.text}" for line in lines()) or {}
            except unreadable:
                return None
            if known or whole:
                self._known[run_id] = known
                records.update(run_id, info={self.KEY: known})
        return known or None


def concluding(status: RunStatus, failure: dict[str, Any], **kept: Any) -> RunStatus:
    """``status`` of a job that concluded ``failure`` (:func:`concluded`): its cause and message, its details
    with what the backend ``kept`` of its own failure."""
    status.details["failure"] = {**kept, **failure}
    status.cause, status.message = cause_of(failure)
    return status
