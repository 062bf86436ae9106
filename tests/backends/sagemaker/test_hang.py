"""A hang rehearsed as AWS ships it (tests/support/sagemaker_container.py: the request cloudddp sent, AWS's real
training toolkit, one namespace-isolated container per host): on 2 hosts × 1 process, rank 1 (algo-2) sleeps in
the middle of an epoch while rank 0 waits in DDP's all-reduce. The hang doctor inside the ranks prints its verdict
before torchrun ends them; the hosts' output goes to CloudWatch Logs (moto) as SageMaker sends it, the job fails
as SageMaker fails it (AlgorithmError with the toolkit's failure file), and ``status`` (the API and the command)
ends with cause ``hang`` naming rank 1, its host and its line, the stacks in its details."""

from __future__ import annotations

import re
from pathlib import Path

import boto3
import pytest

from cloudddp.api import Run
from cloudddp.backends.sagemaker import SageMakerBackend
from cloudddp.backends.status import Cause
from cloudddp.runs.database import RunDatabase
from tests.backends.sagemaker.test_container_rehearsal import CPU_IMAGE, REGION, ROLE, aws, launch, run
from tests.support.aws_emulator import own_bucket, put_logs, set_status
from tests.support.cli import cli
from tests.support.hang_script import TIMEOUT_S, assert_rank_1_named, script
from tests.support.sagemaker_container import Aws

pytestmark = pytest.mark.slow
__all__ = ["aws"]  # the module's moto environment, shared with the container rehearsals


@pytest.mark.timeout(300)
def test_a_rank_asleep_on_the_second_host_is_named_with_its_host_and_line_in_status(tmp_path: Path, aws: Aws) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(script())
    job = {
        "name": "rehearse-hang",
        "code": {"dir": str(tmp_path / "code"), "entry": "train.py"},
        "resources": {"nodes": 2, "gpus_per_node": 0, "processes_per_node": 1, "interconnect": "any"},
        "distribution": {"collective_timeout": f"{TIMEOUT_S}s"},
        "checkpoint": {"enabled": False},
        "sagemaker": {
            "region": REGION,
            "role": ROLE,
            "bucket": own_bucket(tmp_path),
            "instance_type": "ml.m5.xlarge",
            "image": CPU_IMAGE,
        },
    }
    request = launch(job, "hang1")
    rehearsal = run(request, tmp_path / "box", aws, timeout=180)
    print(f"\nhang 2x1 rehearsal: {rehearsal.seconds:.1f} s")
    log = "\n".join(host.log for host in rehearsal.hosts)
    first = rehearsal.host("algo-1")
    assert first.returncode not in (0, None) and first.failure, log[-4000:]  # rank 0 ended the job, as SageMaker
    name = request["TrainingJobName"]
    for host in rehearsal.hosts:  # what SageMaker sends to CloudWatch Logs, and how it fails the job
        put_logs(name, host.name, [line for line in host.lines if line], 0)
    set_status(name, "Failed", "Failed", reason=f"AlgorithmError: {first.failure}")

    status = Run(
        name, SageMakerBackend(records=RunDatabase(), session=boto3.session.Session(region_name=REGION))
    ).status()
    assert status.cause is Cause.HANG, (status, log[-4000:])
    named = "hang: rank 1 on node 1 (algo-2): "
    failure = assert_rank_1_named(status, named)
    assert failure["culprit_host"] == "algo-2", failure
    assert failure["failure_reason"].startswith("AlgorithmError"), failure
    shown = cli("status", name)  # what a person sees, from the verdict kept in the run's record
    assert named in shown.stdout and re.search(r"cause\s+hang", shown.stdout), shown.stdout
