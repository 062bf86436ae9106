"""Secrets after a real submit to the AWS emulator: the two canaries (one line, and a multi-line key) reach the
job's environment in CreateTrainingJob, and nowhere else: not in any other part of any request sent to AWS
(recorded byte for byte by a proxy), any object in the bucket (archives searched inside), any file the CLI, the
recovery watcher or the budget watch wrote, any command line, or any output of the CLI. The watcher's own
relaunch after a capacity failure carries them too, read again from its environment."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import boto3
import pytest

from cloudddp.api import Run
from cloudddp.backends.status import RunState
from cloudddp.runs.database import RunDatabase
from tests.support import canary
from tests.support.aws_emulator import FaultProxy, aws_environment, own_bucket, set_status
from tests.support.cli import ROOT, cli
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow
CAPACITY = "CapacityError: Unable to provision requested ML compute capacity."


def spec(tmp_path: Path) -> Path:
    data = {
        "name": "canary-sm",
        "code": {"dir": str(ROOT / "src_train"), "entry": "train.py", "args": ["--dataset", "synthetic"]},
        "resources": {"nodes": 2, "gpus_per_node": 8, "max_cost": 5000},
        "env": canary.SPEC_ENV,
        "sagemaker": {
            "region": "us-east-1",
            "role": "arn:aws:iam::123456789012:role/SageMakerRole",
            "bucket": own_bucket(tmp_path),
            "instance_type": "ml.p4d.24xlarge",
            "image": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.4-gpu-py311",
        },
    }
    path = tmp_path / "job.json"
    path.write_text(json.dumps(data))  # JSON is YAML
    return path


@pytest.mark.timeout(300)
def test_a_submit_to_the_aws_emulator_sends_the_secrets_to_the_jobs_environment_only(
    tmp_path: Path, cloudddp_home: Path, moto_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = FaultProxy(moto_url)
    with proxy.running() as url:
        for key, value in {**aws_environment(url), **canary.ENVIRONMENT}.items():
            monkeypatch.setenv(key, value)
        monkeypatch.delenv("AWS_PROFILE", raising=False)
        fast = {"CLOUDDDP_RECOVERY_POLL": "0.3", "CLOUDDDP_BUDGET_POLL": "0.2"}
        submitted = cli("submit", str(spec(tmp_path)), "-b", "sagemaker", "-y", "--recover", "2", "--detach", env=fast)
        assert submitted.returncode == 0, submitted.stderr
        outputs = [submitted.stdout, submitted.stderr]
        name = re.search(r"submitted (\S+)", submitted.stderr)
        assert name, submitted.stderr
        run = Run.attach(name.group(1))
        chain = run.chain
        assert chain is not None and chain.watcher_pid
        first = chain.current.run_id
        wait_until(lambda: canary.budget_looks(first) >= 1, timeout=60)  # the budget watch has written its log
        first_watch = RunDatabase().get(first).info["budget"]["watch_pid"]  # type: ignore[union-attr]
        argv_leaks = canary.argv_leaking(chain.watcher_pid) + canary.argv_leaking(first_watch)

        # Capacity lost: the detached watcher submits attempt 2 itself, the secrets read from its environment.
        set_status(first, "Failed", "Failed", reason=CAPACITY)
        second = wait_until(lambda: len(run.chain.attempts) == 2 and run.chain.current.run_id, timeout=120)  # type: ignore[union-attr]
        wait_until(lambda: canary.budget_looks(second) >= 1, timeout=60)
        argv_leaks += canary.argv_leaking(RunDatabase().get(second).info["budget"]["watch_pid"])  # type: ignore[union-attr]

        for args in (("status", run.run_id, "--json"), ("list",), ("cost", second, "--json"), ("logs", second)):
            shown = cli(*args)
            outputs += [shown.stdout, shown.stderr]
        set_status(second, "InProgress", "Training")
        cancelled = cli("cancel", run.run_id)
        assert cancelled.returncode == 0, cancelled.stderr
        outputs += [cancelled.stdout, cancelled.stderr]
        wait_until(lambda: run.status().state is RunState.CANCELLED, timeout=60)

    # The one place the values go: the job's environment, in each attempt's CreateTrainingJob.
    creates = [json.loads(body) for target, _, body in proxy.sent if target == "CreateTrainingJob"]
    assert [c["TrainingJobName"] for c in creates] == [first, second]
    for create in creates:
        assert {k: create["Environment"][k] for k in canary.SENT} == canary.SENT
        for key in canary.SENT:
            del create["Environment"][key]
    assert [leak for c in creates for leak in canary.leaks(json.dumps(c), c["TrainingJobName"])] == []

    # Everything else that went to AWS, every object in the bucket, every file, every output: none of them.
    others = [(t, p, b) for t, p, b in proxy.sent if t != "CreateTrainingJob"]
    assert len(others) >= 10 and {"StopTrainingJob", "DescribeTrainingJob"} <= {t for t, _, _ in others}
    assert [leak for t, p, b in others for leak in canary.leaks(p.encode() + b"\n" + b, f"{t} {p}")] == []
    s3 = boto3.client("s3", endpoint_url=moto_url)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=own_bucket(tmp_path))["Contents"]]
    assert any(k.endswith("sourcedir.tar.gz") for k in keys)
    objects = {k: s3.get_object(Bucket=own_bucket(tmp_path), Key=k)["Body"].read() for k in keys}
    assert [leak for k, body in objects.items() for leak in canary.leaks(body, f"s3 {k}")] == []
    assert canary.searched_files(cloudddp_home) >= 5 and (cloudddp_home / "chains").is_dir()
    assert canary.files_leaking(cloudddp_home, tmp_path) == []
    assert argv_leaks == []
    assert [leak for text in outputs for leak in canary.leaks(text, "cli output")] == []
    assert os.environ["CANARY_TOKEN_SRC"] == canary.TOKEN  # the values were there to leak
