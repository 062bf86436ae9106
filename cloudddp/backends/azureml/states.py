"""Azure ML's job states as cloudddp's: what ``status`` says, and whether a job has ended (its bill is final)."""

from __future__ import annotations

from typing import Any

from cloudddp.backends.status import RunState

STATES = {
    "NotStarted": RunState.PENDING,
    "Queued": RunState.PENDING,
    "Preparing": RunState.STARTING,
    "Provisioning": RunState.STARTING,
    "Starting": RunState.STARTING,
    "Running": RunState.RUNNING,
    "Finalizing": RunState.RUNNING,
    "CancelRequested": RunState.STOPPING,
    "Completed": RunState.SUCCEEDED,
    "Failed": RunState.FAILED,
    "Canceled": RunState.CANCELLED,
    "NotResponding": RunState.UNKNOWN,
}


WAITING = frozenset({"NotStarted", "Queued"})
"""The states of a job accepted but waiting for its nodes: a cluster that cannot scale, or serverless quota in use by
other jobs, keeps a job ``Queued`` (how-to-use-serverless-compute, "Quota"; read 2026-12-06)."""

SAID = {
    "Finalizing": "Finalizing: the training has ended and Azure ML is uploading its outputs and logs",
    "NotResponding": "NotResponding: Azure ML has not heard from the job's nodes for a while (a node lost or "
    "overloaded); it either recovers or fails",
}
"""What a status says for the states whose name alone would puzzle (Azure ML's job status descriptions)."""


def native_state(job: Any) -> str:
    """The job's status as Azure ML names it (the SDK gives an enum, or a string)."""
    return str(getattr(job.status, "value", job.status) or "")


def state_of(job: Any) -> RunState:
    return STATES.get(native_state(job), RunState.UNKNOWN)
