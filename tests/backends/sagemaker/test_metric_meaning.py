"""One meaning for metrics and log tags on SageMaker: a 2-host × 2-process job whose every rank prints the same
measurement (tests/support/ranks.py) is rehearsed in AWS's own toolkit (two namespace-isolated hosts, torchrun on
each); what the hosts printed goes to CloudWatch Logs (moto) as SageMaker sends it, one stream per host, and
cloudddp reads it back: every program line names the global rank the launcher prefixed, the toolkit's lines are
marked as the runtime's, and the metrics are global rank 0's, the same in the attached view as in ``metrics``."""

from __future__ import annotations

import re
from pathlib import Path

import boto3
import pytest

from cloudddp.api import Run
from cloudddp.backends.sagemaker import SageMakerBackend
from cloudddp.backends.status import LogLine
from cloudddp.observe.metrics import MetricRecord
from cloudddp.runs.database import RunDatabase
from tests.backends.sagemaker.test_container_rehearsal import CPU_IMAGE, REGION, ROLE, Aws, aws, launch, run, succeeded
from tests.support import ranks
from tests.support.aws_emulator import put_logs

pytestmark = pytest.mark.slow
__all__ = ["aws"]  # the module's moto environment, shared with the container rehearsals


@pytest.mark.timeout(600)
def test_two_hosts_by_two_processes_tag_every_line_with_its_rank_and_report_rank_0s_metrics(
    tmp_path: Path, aws: Aws
) -> None:
    sagemaker = {"region": REGION, "role": ROLE, "bucket": "cloudddp-rehearsals", "instance_type": "ml.m5.xlarge"}
    spec = ranks.job(tmp_path, sagemaker={**sagemaker, "image": CPU_IMAGE})
    request = launch(spec, "tags")
    rehearsal = run(request, tmp_path / "box", aws)
    succeeded(rehearsal)
    name = request["TrainingJobName"]
    for host in rehearsal.hosts:
        put_logs(name, host.name, [line for line in host.lines if line], 0)  # CloudWatch keeps no empty event
    backend = SageMakerBackend(records=RunDatabase(), session=boto3.session.Session(region_name=REGION))
    job = Run(name, backend)
    lines = list(job.logs())
    ranks.check_tags(lines)
    assert any(line.source == "algo-2/rank3" for line in lines)
    toolkit = [line for line in lines if "Invoking user script" in line.text]
    assert toolkit and all(not line.program and not line.primary for line in toolkit)  # the toolkit's, marked
    records = list(job.metrics())
    assert ranks.shown(records) == ranks.expected()
    seen = list(job.events())
    assert [e for e in seen if isinstance(e, MetricRecord)] == records  # the attached view's records
    shown = [e for e in seen if isinstance(e, LogLine)]
    assert shown and all(line.rank == 0 for line in shown), [(x.source, x.text) for x in shown if x.rank != 0]
    # SageMaker's own charts (the request's MetricDefinitions over the hosts' logs) count rank 0's too.
    assert [round(v, 4) for v in rehearsal.metrics()["loss"]] == [0.1, 0.2, 0.3]
    declared = request["AlgorithmSpecification"]["MetricDefinitions"][-2:]
    assert all(d["Regex"].startswith(re.escape("[rank0]:")) for d in declared), declared
