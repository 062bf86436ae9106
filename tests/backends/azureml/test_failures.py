"""Why an Azure ML job failed, from the error its run history reports (the ``error`` of the run details that
``az ml job show`` and Studio show); the next attempt of a recovery; the two extension points a detached
watcher builds the backend with."""

from __future__ import annotations

from typing import Any

import pytest

from cloudddp.backends.azureml import AzureMLBackend
from cloudddp.backends.azureml.extensions import credential_from_environment, transport_from_environment
from cloudddp.backends.azureml.failures import failure_cause, failure_message, root_error
from cloudddp.backends.plugins import load_spec
from cloudddp.backends.status import Cause
from cloudddp.errors import UserError
from tests.support.cli import ROOT


def details(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """Run details as the run history returns them for a failed job."""
    root = {
        "code": code,
        "severity": None,
        "message": message,
        "messageFormat": None,
        "messageParameters": {},
        "referenceCode": None,
        "detailsUri": None,
        "target": None,
        "details": [],
        "innerError": None,
        "debugInfo": None,
        **extra,
    }
    return {
        "runId": "j1",
        "status": "Failed",
        "warnings": [],
        "error": {"error": root, "componentName": "CommonRuntime", "time": "2026-01-01T00:00:00.000Z"},
    }


PREEMPTED = details(
    "UserError",
    "AzureMLCompute job failed.\nPreemptionError: Nodes of this job got pre-empted. Check if the run has failed or "
    "restarted.\n\tReason: Received pre-emption warning signal",
)
SCRIPT = details(
    "UserError",
    "AzureMLCompute job failed\nExecutionFailed: [REDACTED]\n\texit_codes: 1\n\tAppinsights Reachable: Some(true)",
)
SCRIPT_V1 = details(
    "UserError",
    "Execution failed. User process 'python' exited with status code 1. Please check log file "
    "'user_logs/std_log.txt' for error details. Error: Traceback (most recent call last): ...",
    innerError={"code": "BadArgument", "innerError": {"code": "ExecutionFailed"}},
)
ALLOCATION = details(
    "ServiceError",
    "AzureMLCompute job failed.\nAllocationFailed: Failed to allocate nodes for the job: the requested VM size "
    "Standard_ND96asr_v4 is not available in the current region.",
)
QUOTA = details("UserError", "Job failed: the cluster cannot scale up: QuotaExceeded for standardNDASv4_A100Family")
SYSTEM = details(
    "SystemError",
    "AzureMLCompute job failed.\nJobFailed: The job failed due to an internal error; please resubmit.",
)
SCRIPT_SAYS_EVICTED = details(
    "UserError",
    "AzureMLCompute job failed\nExecutionFailed: [REDACTED]\n\texit_codes: 1\n\tError: KeyError: entry evicted "
    "from the cache; QuotaExceeded by the model's own counter",
)
NODE = details("UserError", "AzureMLCompute job failed.\nNodeUnusable: node tvmps_123 became unusable during the job")


@pytest.mark.parametrize(
    ("run", "cause"),
    [
        (PREEMPTED, Cause.PREEMPTED),  # filed as UserError by Azure, yet not the job's doing
        (SCRIPT, Cause.USER_ERROR),
        (SCRIPT_V1, Cause.USER_ERROR),
        (SCRIPT_SAYS_EVICTED, Cause.USER_ERROR),  # the script's own words do not make it a preemption
        (ALLOCATION, Cause.CAPACITY),
        (QUOTA, Cause.CAPACITY),
        (SYSTEM, Cause.INFRASTRUCTURE),
        (NODE, Cause.INFRASTRUCTURE),
        (details("UserError", "Image build failed: pip could not install torch==9.9"), Cause.USER_ERROR),
        (details("Conflict", "Something else"), Cause.UNKNOWN),
    ],
)
def test_the_cause_comes_from_the_kind_of_error_before_azures_category(run: dict[str, Any], cause: Cause) -> None:
    assert failure_cause(root_error(run)) is cause


def test_no_error_is_an_unknown_cause_and_the_message_is_one_line() -> None:
    assert root_error({"runId": "j1", "status": "Failed"}) is None
    assert failure_cause(None) is Cause.UNKNOWN
    line = failure_message(root_error(PREEMPTED))
    assert "\n" not in line and line.startswith("AzureMLCompute job failed. PreemptionError: Nodes of this job")
    assert len(failure_message(root_error(details("UserError", "x" * 1000)), limit=50)) == 50


def test_the_next_attempt_has_its_own_lower_case_name_and_the_same_checkpoint_folder() -> None:
    spec = load_spec(ROOT / "jobs" / "cifar10-azureml.yaml", ["resources.spot=true"])
    plan = AzureMLBackend(token="t1").render(spec)
    second = AzureMLBackend().for_attempt(plan, 2)
    third = AzureMLBackend().for_attempt(second, 3)
    assert second.job_name == f"{plan.job_name}-r2" and third.job_name == f"{plan.job_name}-r3"
    job = third.request["job"]
    assert job["name"] == third.job_name == third.job_name.lower()
    assert job["tags"]["cloudddp:attempt"] == "3"
    assert job["outputs"]["checkpoints"] == plan.request["job"]["outputs"]["checkpoints"]
    assert (
        f"name: {third.job_name}\n" in third.documents["job.yml"]
        and "cloudddp:attempt: '3'" in third.documents["job.yml"]
    )
    assert "cloudddp:attempt" not in plan.request["job"]["tags"]  # the first attempt's plan is left as it was


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("nocolon", "is not module:attribute"),
        ("no_such_module_here:X", "cannot import no_such_module_here"),
        ("os:no_such_attribute", "os has no no_such_attribute"),
        ("os:sep", "sep is not callable"),
        ("builtins:dict", "dict is not an azure-core TokenCredential"),
    ],
)
def test_a_credential_variable_that_cannot_be_used_is_a_user_error_naming_it(
    value: str, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLOUDDDP_AZURE_CREDENTIAL", value)
    with pytest.raises(UserError, match="CLOUDDDP_AZURE_CREDENTIAL") as raised:
        credential_from_environment()
    assert says in str(raised.value)


def test_the_extension_points_are_used_when_nothing_is_passed_in_code(monkeypatch: pytest.MonkeyPatch) -> None:
    from azure.core.pipeline.transport import RequestsTransport

    monkeypatch.delenv("CLOUDDDP_AZURE_TRANSPORT", raising=False)
    assert transport_from_environment() is None and AzureMLBackend().transport is None
    monkeypatch.setenv("CLOUDDDP_AZURE_TRANSPORT", "builtins:dict")
    with pytest.raises(UserError, match="is not an azure-core HttpTransport"):
        transport_from_environment()
    monkeypatch.setenv("CLOUDDDP_AZURE_TRANSPORT", "azure.core.pipeline.transport:RequestsTransport")
    assert isinstance(AzureMLBackend().transport, RequestsTransport)
    monkeypatch.setenv("CLOUDDDP_AZURE_CREDENTIAL", "tests.support.azure_rig:FakeCredential")
    assert type(AzureMLBackend()._credential()).__name__ == "FakeCredential"
