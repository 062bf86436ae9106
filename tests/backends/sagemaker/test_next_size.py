"""``limits.recover_to: next_size`` as the detached watcher runs it against the AWS emulator: the next size's
real preflight (Service Quotas, read page by page from the emulator) refuses a size with no quota, and the
watcher skips it, says so, and launches the one after it. Nothing is stubbed in the watcher or the backend."""

from __future__ import annotations

import datetime
import re

import boto3
import pytest

from cloudddp.api import Job, Run
from cloudddp.backends.status import RunState
from cloudddp.catalog.ranking import ranked_sizes
from cloudddp.runs.runner import get_backend
from tests.support.aws_emulator import aws_environment, sagemaker_quotas, set_status
from tests.support.cli import cli
from tests.support.harnesses import TINY, SageMakerHarness
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow
CAPACITY = (
    "CapacityError: Unable to provision requested ML compute capacity. Please retry using a different ML instance type."
)


def test_a_next_size_without_quota_fails_its_preflight_on_the_emulator_and_the_watcher_moves_past_it(
    moto_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in aws_environment(moto_url).items():
        monkeypatch.setenv(key, value)
    overrides = [
        *SageMakerHarness(moto_url).overrides,
        "resources.gpus_per_node=1",
        "sagemaker.instance_type=ml.g5.xlarge",
        "limits.recover_to=next_size",
        "limits.capacity_tries=1",
    ]
    job = Job.load(TINY, overrides)
    _, ranking = ranked_sizes(get_backend("sagemaker").size_target(job.spec), job.spec)
    refused, taken = ranking[0], ranking[1]
    quotas = {
        "ml.g5.xlarge for training job usage": 1,
        f"{refused} for training job usage": 0,  # the next size: the account may not run one
        f"{taken} for training job usage": 2,
    }
    started = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=1)
    with sagemaker_quotas(quotas):
        result = cli(
            "submit",
            str(TINY),
            "-b",
            "sagemaker",
            "-y",
            *[a for o in overrides for a in ("-o", o)],
            "--recover",
            "2",
            "--detach",
            env={"CLOUDDDP_RECOVERY_POLL": "0.3"},
        )
        assert result.returncode == 0, result.stderr
        assert f"it moves to {refused}, then {taken}" in result.stderr, result.stderr
        submitted = re.search(r"submitted (\S+)", result.stderr)
        assert submitted, result.stderr
        run = Run.attach(submitted.group(1))
        chain = run.chain
        assert chain is not None
        first = chain.current.run_id
        set_status(first, "Failed", "Failed", reason=CAPACITY)
        current = wait_until(lambda: len(run.chain.attempts) == 2 and run.chain.current, timeout=120)  # type: ignore[union-attr]

    sagemaker = boto3.client("sagemaker")
    assert current.size == taken
    described = sagemaker.describe_training_job(TrainingJobName=current.run_id)
    assert described["ResourceConfig"]["InstanceType"] == taken
    message = run.chain.message  # type: ignore[union-attr]
    assert f"skipped {refused} (quota '{refused} for training job usage': 0 allowed, the job needs 1" in message, (
        message
    )
    # No job was ever created on the refused size: its preflight ran before anything was sent.
    pages = sagemaker.get_paginator("list_training_jobs").paginate(CreationTimeAfter=started)
    created = [j["TrainingJobName"] for page in pages for j in page["TrainingJobSummaries"]]
    assert {first, current.run_id} <= set(created), created
    # Other tests' jobs on the session's moto may be listed too (their detached watchers go on): the claim is
    # about sizes, so every listed job is asked for its instance type.
    sizes = {sagemaker.describe_training_job(TrainingJobName=n)["ResourceConfig"]["InstanceType"] for n in created}
    assert refused not in sizes, sizes

    set_status(current.run_id, "Completed", "Completed")
    status = wait_until(lambda: (s := run.status()).state.terminal and s, timeout=60)
    assert status.state is RunState.SUCCEEDED
    assert [a["size"] for a in status.details["attempts"]] == ["ml.g5.xlarge", taken]
