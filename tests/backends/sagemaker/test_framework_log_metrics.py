"""Metrics from a framework's log files on SageMaker, rehearsed in AWS's own toolkit (two hosts × two processes):
the shipped reader (``_cloudddp_logs.py``) beside the launcher in the container reads the ``metrics.csv`` global rank
0 writes, prints its rows as rank 0's metric lines, and cloudddp reads them back from CloudWatch Logs."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest

from cloudddp.api import Run
from cloudddp.backends.sagemaker import SageMakerBackend
from cloudddp.runs.registry import Registry
from tests.across_backends.test_framework_log_metrics import SCRIPT
from tests.backends.sagemaker.test_container_rehearsal import CPU_IMAGE, REGION, ROLE, Aws, aws, launch, run, succeeded
from tests.support.aws_emulator import put_logs

pytestmark = pytest.mark.slow
__all__ = ["aws"]  # the module's moto environment, shared with the container rehearsals


@pytest.mark.timeout(600)
def test_a_csv_loggers_rows_come_back_as_rank_0s_metrics_from_cloudwatch(tmp_path: Path, aws: Aws) -> None:
    code = tmp_path / "csv"
    code.mkdir()
    (code / "train.py").write_text(SCRIPT)
    sagemaker = {"region": REGION, "role": ROLE, "bucket": "cloudddp-rehearsals", "instance_type": "ml.m5.xlarge"}
    spec = {
        "name": "csv",
        "code": {"dir": str(code), "entry": "train.py"},
        "resources": {"nodes": 2, "gpus_per_node": 0, "processes_per_node": 2},
        "sagemaker": {**sagemaker, "image": CPU_IMAGE},
    }
    request = launch(spec, "csvlog")
    rehearsal = run(request, tmp_path / "box", aws)
    succeeded(rehearsal)
    name = request["TrainingJobName"]
    for host in rehearsal.hosts:
        put_logs(name, host.name, [line for line in host.lines if line], 0)
    backend = SageMakerBackend(registry=Registry(), session=boto3.session.Session(region_name=REGION))
    records = list(Run(name, backend).metrics())
    assert [(r.step, r.epoch, r.values) for r in records] == [
        (0, 0, {"train_loss": 1.0}),
        (1, 1, {"train_loss": 0.5}),
        (2, 2, {"train_loss": 0.3333}),
    ]
