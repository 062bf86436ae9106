"""What a run is doing, said the same way by every backend: its state, why it ended, its status and its log lines."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class RunState(str, Enum):
    PENDING = "pending"  # accepted, waiting for capacity or a queue
    STARTING = "starting"  # provisioning, pulling images, rendezvous
    RUNNING = "running"
    STOPPING = "stopping"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"

    @property
    def terminal(self) -> bool:
        return self in (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED)


class Cause(str, Enum):
    """Why a run ended without succeeding, as its backend reports it; recovery resubmits only what the
    job itself did not cause."""

    PREEMPTED = "preempted"  # spot / low priority capacity taken back, a Slurm preemption
    CAPACITY = "capacity"  # no capacity for the size (now), quota reached at start
    INFRASTRUCTURE = "infrastructure"  # a node or host lost, the platform's own error
    USER_ERROR = "user error"  # the script failed (a traceback, a non-zero exit, a bad argument)
    LIMIT = "limit"  # the job ran into limits.max_runtime
    HANG = "hang"  # a rank stuck: a collective timed out, or no rank printed for limits.stall_timeout
    CANCELLED = "cancelled"  # someone cancelled it
    UNKNOWN = "unknown"

    @property
    def recoverable(self) -> bool:
        return self in (Cause.PREEMPTED, Cause.CAPACITY, Cause.INFRASTRUCTURE, Cause.HANG)


QUEUED = "queued"
"""The key of :attr:`RunStatus.details` a backend sets True for a pending run that waits in its platform's queue for
quota or nodes (Azure ML's ``Queued``): a recovery that can move cancels it after ``limits.queue_timeout``."""


@dataclass
class RunStatus:
    """A run's status as its backend reports it: its state, the backend's own word for it, a message, when it
    started and ended, and why it ended."""

    run_id: str
    backend: str
    state: RunState
    name: str = ""
    native_state: str = ""
    message: str = ""
    created_at: float | None = None
    ended_at: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    cause: Cause | None = None
    """Why it ended, for a run that failed or was cancelled."""

    def _repr_html_(self) -> str:
        import html

        colour = {"succeeded": "#15803d", "failed": "#b91c1c", "cancelled": "#a16207"}.get(self.state.value, "#1d4ed8")
        return (
            f"<span style='background:{colour};color:white;padding:1px 6px;border-radius:4px'>"
            f"{self.state.value}</span> "
            f"<code>{html.escape(self.run_id)}</code> ({html.escape(self.backend)}) {html.escape(self.message)}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "backend": self.backend,
            "name": self.name,
            "state": self.state.value,
            "native_state": self.native_state,
            "message": self.message,
            "created_at": self.created_at,
            "ended_at": self.ended_at,
            "cause": self.cause.value if self.cause else None,
            "details": self.details,
        }


@dataclass(frozen=True)
class LogLine:
    """One line a run printed, with where it came from."""

    source: str
    """Where the line came from: ``rank0``, ``node1/rank3``, ``algo-2/rank3``; for a line from outside the
    program, who printed it (``node1/torchrun``, ``slurm``, ``algo-2``)."""
    text: str
    time: float | None = None
    primary: bool = True
    """Global rank 0's line: what a person watching the run sees by default."""
    rank: int | None = None
    """The global rank of the program process that printed it; None for a line from outside the program (the
    launcher, the platform's toolkit, the runtime) or one whose process cannot be known."""

    @property
    def program(self) -> bool:
        """Printed by the job's program (a rank is known), not by what runs it."""
        return self.rank is not None
