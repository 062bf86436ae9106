"""A failed SageMaker job whose log holds the hang doctor's verdict is a hang: its status, from DescribeTrainingJob's
answer and the job's CloudWatch lines (both stubbed here; the rehearsal in test_hang.py runs the real ones), and
the log read once, what it gave kept in the run's record."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from cloudddp.backends.records import MemoryRecords
from cloudddp.backends.sagemaker import SageMakerBackend
from cloudddp.backends.sagemaker.logs import host_line
from cloudddp.backends.sagemaker.status import LOG_SETTLE_S
from cloudddp.backends.status import Cause, LogLine, RunState
from cloudddp.backends.verdicts import KeptVerdicts as Hangs
from tests.support.hang_lines import doctor_lines

JOB = "hang-260101000000"
ALGORITHM_ERROR = 'AlgorithmError: ExecuteUserScriptError:\nExitCode 1\nErrorMessage "RuntimeError: Timed out waiting'


def described(status: str = "Failed", reason: str = ALGORITHM_ERROR, ended_ago: float = 600) -> dict[str, Any]:
    """DescribeTrainingJob's answer for a job of 2 hosts that ended ``ended_ago`` seconds ago."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return {
        "TrainingJobStatus": status,
        "SecondaryStatus": status,
        "FailureReason": reason,
        "CreationTime": now - datetime.timedelta(seconds=ended_ago + 300),
        "TrainingEndTime": now - datetime.timedelta(seconds=ended_ago),
        "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 2},
    }


def cloudwatch(verdict: bool = True) -> list[LogLine]:
    """Both hosts' lines as logs.py gives them: rank 0's (algo-1) with the doctor's lines behind the launcher's rank
    prefix, rank 1's (algo-2) lines interleaved between them."""
    lines = [host_line("algo-1", "[rank0]:rank 0 step 4", 1.0, hosts=2)]
    for i, text in enumerate(doctor_lines() if verdict else ["Traceback (most recent call last):"]):
        lines.append(host_line("algo-1", f"[rank0]:{text}", 2.0 + i, hosts=2))
        lines.append(host_line("algo-2", f"[rank1]:rank 1 still here {i}", 2.0 + i, hosts=2))
    return [*lines, host_line("algo-1", "2026-01-01 00:00:10,000 sagemaker-training-toolkit ERROR", 20.0, hosts=2)]


class Stubbed:
    """A SageMaker backend whose DescribeTrainingJob answer and log lines are given; it counts the log's reads."""

    def __init__(self, records: MemoryRecords, d: dict[str, Any], lines: list[LogLine]) -> None:
        self.backend = SageMakerBackend(records=records)
        self.d, self.lines, self.reads = d, lines, 0
        self.backend._describe_job = lambda run_id: self.d  # type: ignore[method-assign]
        self.backend._lines = self._lines  # type: ignore[method-assign]

    def _lines(self, run_id: str, hosts: int, *, follow: bool) -> Iterator[LogLine]:
        assert (run_id, hosts, follow) == (JOB, 2, False)
        self.reads += 1
        yield from self.lines


def recorded() -> MemoryRecords:
    records = MemoryRecords()
    records.add(JOB, "sagemaker", "hang", "pending", {"region": "us-east-1"})
    return records


def test_a_failed_job_whose_log_holds_the_verdict_is_a_hang_and_its_log_is_read_once() -> None:
    records = recorded()
    stubbed = Stubbed(records, described(), cloudwatch())
    status = stubbed.backend.status(JOB)
    assert status.state is RunState.FAILED and status.cause is Cause.HANG, status
    assert status.message == "hang: " + doctor_lines()[0].removeprefix("cloudddp: hang: "), status.message
    failure = status.details["failure"]
    assert failure["culprits"] == [1] and (failure["culprit_node"], failure["culprit_host"]) == ("1", "algo-2")
    assert failure["log_tail"] == doctor_lines()[2:], failure["log_tail"]  # rank 0's stacks; no line of algo-2's
    assert failure["failure_reason"] == ALGORITHM_ERROR
    assert status.details["instance_count"] == 2  # DescribeTrainingJob's details kept

    assert stubbed.backend.status(JOB).cause is Cause.HANG and stubbed.reads == 1
    again = Stubbed(records, described(), [])  # another process: the verdict from the run's record
    assert again.backend.status(JOB).message == status.message and again.reads == 0
    assert records.get(JOB).info[Hangs.KEY]["culprits"] == [1]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("d", "cause"),
    [
        (described(reason="CapacityError: Unable to provision requested ML compute capacity."), Cause.CAPACITY),
        (described(reason="InternalServerError: We encountered an internal error."), Cause.INFRASTRUCTURE),
        (described(status="Completed", reason=""), None),
        (described(status="Stopped", reason=""), Cause.CANCELLED),
    ],
    ids=["capacity", "infrastructure", "completed", "stopped"],
)
def test_only_a_failure_of_the_script_is_looked_for_a_verdict(d: dict[str, Any], cause: Cause | None) -> None:
    stubbed = Stubbed(recorded(), d, cloudwatch())
    assert stubbed.backend.status(JOB).cause is cause and stubbed.reads == 0


def test_a_script_failure_without_a_verdict_stays_the_scripts_and_its_whole_log_is_not_read_again() -> None:
    stubbed = Stubbed(recorded(), described(), cloudwatch(verdict=False))
    status = stubbed.backend.status(JOB)
    assert status.cause is Cause.USER_ERROR and status.message == ALGORITHM_ERROR and "failure" not in status.details
    assert stubbed.backend.status(JOB).cause is Cause.USER_ERROR and stubbed.reads == 1


def test_a_log_read_right_after_the_job_ended_is_read_again_until_it_is_whole() -> None:
    stubbed = Stubbed(recorded(), described(ended_ago=1), cloudwatch(verdict=False))
    assert stubbed.backend.status(JOB).cause is Cause.USER_ERROR
    stubbed.lines = cloudwatch()  # CloudWatch's last events, delivered late
    assert stubbed.backend.status(JOB).cause is Cause.HANG and stubbed.reads == 2
    stubbed.d = described(ended_ago=LOG_SETTLE_S + 1)
    stubbed.lines = cloudwatch(verdict=False)
    assert stubbed.backend.status(JOB).cause is Cause.HANG and stubbed.reads == 2  # a verdict found is kept


def test_a_log_that_cannot_be_read_leaves_the_scripts_failure_and_is_read_at_the_next_status() -> None:
    stubbed = Stubbed(MemoryRecords(), described(), cloudwatch())  # no record: kept in memory

    def refused(run_id: str, hosts: int, *, follow: bool) -> Iterator[LogLine]:
        yield from ()
        raise ClientError(
            {"Error": {"Code": "AccessDeniedException", "Message": "no logs:GetLogEvents"}}, "GetLogEvents"
        )

    stubbed.backend._lines = refused  # type: ignore[method-assign]
    assert stubbed.backend.status(JOB).cause is Cause.USER_ERROR
    stubbed.backend._lines = stubbed._lines  # type: ignore[method-assign]
    assert stubbed.backend.status(JOB).cause is Cause.HANG
    assert stubbed.backend.status(JOB).cause is Cause.HANG and stubbed.reads == 1
