"""A failed Azure ML job whose log files hold the hang doctor's verdict is a hang: its status through the real
azure-ai-ml SDK against the offline workspace (tests/support/azure_rig.py), the verdict read from the rank's log
file on Azurite once, what it gave kept in the run's record. The job itself is not run here (test_hang.py runs it)."""

from __future__ import annotations

from typing import Any

from cloudddp.backends.status import Cause, RunState
from cloudddp.backends.verdicts import KeptVerdicts as Hangs
from tests.support.azure_rig import PREEMPTED, SCRIPT_FAILED
from tests.support.hang_lines import doctor_lines
from tests.support.harnesses import AzureMLHarness

VERDICT = doctor_lines("node-0", "node-1")


def with_logs(blob_endpoint: str, verdict: bool = True) -> tuple[AzureMLHarness, str]:
    """A job of 2 processes whose files hold what each printed: rank 0 the doctor's lines after its steps."""
    harness = AzureMLHarness(blob_endpoint)
    job = harness.launch()
    harness.model.set_job_status(job, "Running")
    rank0 = ["rank 0 step 4", *(VERDICT if verdict else []), "Traceback (most recent call last):", "RuntimeError: x"]
    harness.model.write_log(job, 0, "\n".join(rank0) + "\n")
    harness.model.write_log(job, 1, "rank 1 step 4\nrank 1 sleeps\n")
    return harness, job


def test_a_failed_job_whose_log_holds_the_verdict_is_a_hang_read_once(blob_endpoint: str) -> None:
    harness, job = with_logs(blob_endpoint)
    harness.model.fail_job(job, SCRIPT_FAILED)
    status = harness.backend.status(job)
    assert status.state is RunState.FAILED and status.cause is Cause.HANG, status
    assert status.message == "hang: " + VERDICT[0].removeprefix("cloudddp: hang: "), status.message
    failure: dict[str, Any] = status.details["failure"]
    assert failure["culprits"] == [1] and (failure["culprit_node"], failure["culprit_host"]) == ("1", "node-1")
    assert failure["log_tail"] == VERDICT[2:], failure["log_tail"]
    assert failure["code"] == "UserError" and "ExecutionFailed" in failure["message"]  # the run history's error
    assert status.details["compute"] == "cpu-cluster"  # the job's details kept

    harness.model.overwrite_log(job, 0, "written again: no verdict\n")
    assert harness.backend.status(job).message == status.message  # not read again
    record = harness.backend.records.get(job)
    assert record is not None and record.info[Hangs.KEY]["culprits"] == [1]


def test_a_failure_of_the_script_without_a_verdict_stays_the_scripts_and_is_not_read_again(blob_endpoint: str) -> None:
    harness, job = with_logs(blob_endpoint, verdict=False)
    harness.model.fail_job(job, SCRIPT_FAILED)
    status = harness.backend.status(job)
    assert status.cause is Cause.USER_ERROR and "ExecutionFailed" in status.message, status
    harness.model.write_log(job, 0, "\n".join(VERDICT) + "\n")
    assert harness.backend.status(job).cause is Cause.USER_ERROR  # the log was whole when the job failed


def test_a_preempted_job_stays_preempted_whatever_its_log_says(blob_endpoint: str) -> None:
    harness, job = with_logs(blob_endpoint)
    harness.model.fail_job(job, PREEMPTED)  # the nodes taken back while rank 1 slept: never read for a verdict
    status = harness.backend.status(job)
    record = harness.backend.records.get(job)
    assert status.cause is Cause.PREEMPTED and record is not None and Hangs.KEY not in record.info, status
