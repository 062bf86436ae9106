"""``checkpoint.files`` in the SageMaker container rehearsal: a tutorial script that saves ``snapshot.pt`` in its
working folder (/opt/ml/code) resumes on a resubmit, its file kept in CheckpointConfig.LocalPath and synced to S3."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.backends.sagemaker.test_container_rehearsal import CPU_IMAGE, REGION, ROLE, aws, launch, run, succeeded
from tests.support.aws_emulator import own_bucket
from tests.support.own_saver import saved_epochs, saver_code
from tests.support.sagemaker_container import Aws

pytestmark = pytest.mark.slow
__all__ = ["aws"]  # the module's moto environment, shared with the container rehearsals


def test_an_own_scripts_declared_snapshot_resumes_on_a_resubmit(aws: Aws, tmp_path: Path) -> None:
    spec = {
        "name": "keeper",
        "code": {"dir": str(saver_code(tmp_path)), "entry": "train.py", "args": ["2"]},
        "checkpoint": {"files": ["snapshot.pt"]},
        # two processes on one host: each runs the launcher, which links once under a lock
        "resources": {"nodes": 1, "gpus_per_node": 0, "processes_per_node": 2, "interconnect": "any"},
        "sagemaker": {
            "region": REGION,
            "role": ROLE,
            "bucket": own_bucket(tmp_path),  # the test's own: both jobs find the same checkpoints there
            "instance_type": "ml.m5.xlarge",
            "image": CPU_IMAGE,
        },
    }
    first = run(launch(spec, "k1"), tmp_path / "first", aws)
    succeeded(first)
    text = "\n".join(first.host("algo-1").lines)
    assert saved_epochs(text) == [0, 1] and "Resuming" not in text, text[-3000:]
    assert (first.host("algo-1").opt_ml / "checkpoints" / "files" / "snapshot.pt").is_file()
    second = run(launch(spec, "k2"), tmp_path / "second", aws)  # a resubmit: another job, a fresh container
    succeeded(second)
    text = "\n".join(second.host("algo-1").lines)
    assert "Resuming training from snapshot at Epoch 2" in text and saved_epochs(text) == [2, 3], text[-3000:]
