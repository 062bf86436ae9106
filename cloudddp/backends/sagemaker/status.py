"""A SageMaker training job's status as cloudddp's, from DescribeTrainingJob: its state (TrainingJobStatus, with
SecondaryStatus telling a job still starting from one running, and a stop at a time limit from a cancel), and
why a failed job failed, from its FailureReason; a job whose script failed because a collective timed out is a
hang, named by the hang doctor's verdict in its log (:class:`cloudddp.backends.verdicts.KeptVerdicts`)."""

from __future__ import annotations

import datetime
from typing import Any

from cloudddp.backends.status import Cause, RunState, RunStatus

_NOT_FOUND = ("Requested resource not found", "Could not find", "does not exist")
_STATES = {
    "InProgress": RunState.RUNNING,
    "Completed": RunState.SUCCEEDED,
    "Failed": RunState.FAILED,
    "Stopping": RunState.STOPPING,
    "Stopped": RunState.CANCELLED,
}
_TIME_LIMITS = {  # SecondaryStatus of a job SageMaker stopped at its StoppingCondition
    "MaxRuntimeExceeded": "stopped at its time limit: MaxRuntimeExceeded (limits.max_runtime)",
    "MaxWaitTimeExceeded": "stopped at its time limit: MaxWaitTimeExceeded (managed spot waited and ran longer than "
    "sagemaker.max_wait)",
}
_STARTING = {
    "Starting",
    "LaunchingMLInstances",
    "PreparingTrainingStack",
    "Downloading",
    "DownloadingTrainingImage",
    "Pending",
    "Restarting",
}


_CAUSES = (  # FailureReason starts with the error's kind (DescribeTrainingJob)
    ("CapacityError", Cause.CAPACITY),
    ("InsufficientCapacity", Cause.CAPACITY),
    ("InternalServerError", Cause.INFRASTRUCTURE),
    ("InternalFailure", Cause.INFRASTRUCTURE),
    ("AlgorithmError", Cause.USER_ERROR),
    ("ClientError", Cause.USER_ERROR),
)


def failure_cause(reason: str) -> Cause:
    """Why a training job failed, from its FailureReason (``CapacityError: ...``, ``AlgorithmError: ...``)."""
    if "MaxRuntimeInSeconds" in reason or reason.startswith("MaxRuntimeExceeded"):
        return Cause.LIMIT
    return next((cause for prefix, cause in _CAUSES if reason.startswith(prefix)), Cause.UNKNOWN)


def describe_job(sm: Any, name: str) -> dict[str, Any] | None:
    """DescribeTrainingJob through ``sm`` (a SageMaker client), or None when there is no such job."""
    from botocore.exceptions import ClientError

    try:
        found: dict[str, Any] = sm.describe_training_job(TrainingJobName=name)
    except ClientError as e:
        message = e.response.get("Error", {}).get("Message", "")
        if e.response.get("Error", {}).get("Code") in ("ValidationException", "ResourceNotFound") and any(
            s in message for s in _NOT_FOUND
        ):
            return None
        raise
    return found


def job_status(backend: str, run_id: str, d: dict[str, Any]) -> RunStatus:
    """The status of run ``run_id`` from its DescribeTrainingJob answer ``d``."""
    native, secondary = d.get("TrainingJobStatus", ""), d.get("SecondaryStatus", "")
    state = _STATES.get(native, RunState.UNKNOWN)
    if state is RunState.RUNNING and secondary in _STARTING:
        state = RunState.STARTING
    created, ended = d.get("CreationTime"), d.get("TrainingEndTime")
    cause = (
        failure_cause(d.get("FailureReason") or "")
        if state is RunState.FAILED
        else (Cause.CANCELLED if state is RunState.CANCELLED else None)
    )
    message = d.get("FailureReason") or secondary
    if native == "Stopped" and secondary in _TIME_LIMITS:  # stopped at a StoppingCondition: a limit, no cancel
        state, cause, message = RunState.FAILED, Cause.LIMIT, _TIME_LIMITS[secondary]
    return RunStatus(
        run_id=run_id,
        backend=backend,
        state=state,
        name=run_id.rsplit("-", 2)[0],
        native_state=f"{native}/{secondary}" if secondary else native,
        message=message,
        created_at=created.timestamp() if isinstance(created, datetime.datetime) else None,
        ended_at=ended.timestamp() if isinstance(ended, datetime.datetime) else None,
        details={
            "instance_type": d.get("ResourceConfig", {}).get("InstanceType"),
            "instance_count": d.get("ResourceConfig", {}).get("InstanceCount"),
            "billable_seconds": d.get("BillableTimeInSeconds"),
        },
        cause=cause,
    )


LOG_SETTLE_S = 60.0
"""How long after a job ended its CloudWatch log is taken as whole (a margin of cloudddp's: CloudWatch Logs promises
no delivery time): until then a log without a verdict is read again at the next status."""
