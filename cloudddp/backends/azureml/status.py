"""An Azure ML job's status as cloudddp's: its state from the job itself (states.py), and why a failed job failed
from the error in its run history (failures.py says which cause that error is); a job whose script failed because a
collective timed out is a hang, named by the hang doctor's verdict in its log
(:class:`cloudddp.backends.verdicts.KeptVerdicts`)."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from cloudddp.backends.azureml.client import run_details
from cloudddp.backends.azureml.failures import failure_cause, failure_message, root_error
from cloudddp.backends.azureml.states import SAID, STATES, WAITING, native_state
from cloudddp.backends.status import QUEUED, Cause, RunState, RunStatus

Failure = tuple[Cause, str, dict[str, str]]
"""Why a job failed: the cause, what the status says, and the error (``code``, ``message``) for its details."""


def find_job(client: Any, run_id: str) -> Any:
    """Job ``run_id`` through ``client`` (an MLClient), or None when the workspace has no such job."""
    from azure.core.exceptions import ResourceNotFoundError

    try:
        return client.jobs.get(run_id)
    except ResourceNotFoundError:
        return None


def job_status(backend: str, run_id: str, job: Any, failure: Callable[[], Failure]) -> RunStatus:
    """The status of run ``run_id`` from its job; ``failure`` is asked only when the job has failed."""
    native = native_state(job)
    state = STATES.get(native, RunState.UNKNOWN)
    ctx = getattr(job, "creation_context", None)
    created = getattr(ctx, "created_at", None)
    details = {
        "studio_url": job.studio_url,
        "compute": job.compute,
        "instance_count": getattr(job.resources, "instance_count", None),
    }
    if native in WAITING:
        details[QUEUED] = True
    cause, message = (Cause.CANCELLED if state is RunState.CANCELLED else None), SAID.get(native, native)
    if state is RunState.FAILED:
        cause, message, error = failure()
        details["failure"] = error
    return RunStatus(
        run_id=run_id,
        backend=backend,
        state=state,
        name=str(job.display_name or run_id),
        native_state=native,
        message=message,
        created_at=created.timestamp() if isinstance(created, datetime.datetime) else None,
        details=details,
        cause=cause,
    )


class Failures:
    """Why failed jobs failed, each read from its run history once: a failed job's error does not change."""

    def __init__(self) -> None:
        self._known: dict[str, Failure] = {}

    def of(self, client: Any, run_id: str) -> Failure:
        """Why job ``run_id`` failed, read through ``client`` (an MLClient); an unknown cause, saying why, when the
        run history cannot be read or has no error yet."""
        from azure.core.exceptions import AzureError

        if run_id in self._known:
            return self._known[run_id]
        try:
            details = run_details(client, run_id).as_dict()
        except AzureError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            return Cause.UNKNOWN, f"Failed (why could not be read from the run history: {first})", {}
        error = root_error(details)
        if error is None:  # not kept: the error may be recorded a moment after the status
            return Cause.UNKNOWN, "Failed (the run history gives no error yet; the job's logs may say why)", {}
        failure = {"code": str(error.get("code", "")), "message": failure_message(error, limit=4000)}
        self._known[run_id] = (failure_cause(error), failure_message(error), failure)
        return self._known[run_id]
