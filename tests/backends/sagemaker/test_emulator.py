"""The SageMaker backend against moto running as a real HTTP server on 127.0.0.1 (no mocks)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from cloudddp.backends.plugins import spec_from_dict
from cloudddp.backends.sagemaker import SageMakerBackend
from cloudddp.backends.sagemaker.request import shim_payload
from cloudddp.backends.status import Cause, RunState
from cloudddp.code.snapshot import pack
from cloudddp.errors import UserError
from cloudddp.runs.database import RunDatabase
from cloudddp.runtime import checkpoint_key, shipped_files
from tests.support.aws_emulator import (
    ACCOUNT_ID,
    FaultProxy,
    own_bucket,
    put_logs,
    set_status,
    use_emulator,
)
from tests.support.cli import ROOT, cli
from tests.support.waiting import LineReader

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def aws_env(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    return use_emulator(monkeypatch, moto_url)


def job(tmp_path: Path, **extra: object) -> dict:
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "part-0.bin").write_bytes(os.urandom(2048))  # unique per test
    return {
        "name": "tiny-sm",
        "code": {
            "dir": str(ROOT / "src_train"),
            "entry": "train.py",
            "args": ["--dataset", "synthetic", "--epochs", "2"],
        },
        "inputs": {"train": {"path": str(data), "arg": "--data-dir"}},
        "resources": {"nodes": 2, "gpus_per_node": 8},
        "sagemaker": {
            "region": "us-east-1",
            "role": "arn:aws:iam::123456789012:role/SageMakerRole",
            "bucket": own_bucket(tmp_path),  # moto lives for the session: each test has a bucket of its own
            "instance_type": "ml.p4d.24xlarge",
            "image": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.4-gpu-py311",
        },
        **extra,
    }


def metric(epoch: int, **values: float) -> str:
    return "CLOUDDDP_METRIC " + json.dumps(
        {"epoch": epoch, "step": epoch * 10, "time": 1.0, **values}, separators=(",", ":")
    )


def test_submit_uploads_by_content_hash_creates_the_job_and_streams_logs_and_metrics(tmp_path: Path) -> None:
    spec_path = tmp_path / "job.json"
    spec_path.write_text(json.dumps(job(tmp_path)))  # JSON is YAML
    result = cli("submit", str(spec_path), "-b", "sagemaker", "--detach", "--quiet", "-y")
    assert result.returncode == 0, result.stderr
    name = result.stdout.strip()

    # The code archive (the folder and the shipped launcher) is in S3 under its own sha256, byte-identical
    # to a local deterministic pack.
    bucket = own_bucket(tmp_path)
    s3 = boto3.client("s3")
    snapshot = pack(ROOT / "src_train", extra=shipped_files())
    body = s3.get_object(Bucket=bucket, Key=f"cloudddp/code/{snapshot.sha256}/sourcedir.tar.gz")["Body"].read()
    assert hashlib.sha256(body).hexdigest() == snapshot.sha256

    d = boto3.client("sagemaker").describe_training_job(TrainingJobName=name)
    # The channel the job reads holds exactly this test's data file, byte for byte.
    [channel] = [c for c in d["InputDataConfig"] if c["ChannelName"] == "train"]
    uri = channel["DataSource"]["S3DataSource"]["S3Uri"]
    assert uri.startswith(f"s3://{bucket}/cloudddp/data/train/")
    prefix = uri.removeprefix(f"s3://{bucket}/").rstrip("/") + "/"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]]
    assert sorted(keys) == [f"{prefix}.cloudddp-complete", f"{prefix}part-0.bin"]  # the file, then its marker
    held = s3.get_object(Bucket=bucket, Key=f"{prefix}part-0.bin")["Body"].read()
    assert held == (tmp_path / "data" / "part-0.bin").read_bytes()

    assert d["AlgorithmSpecification"]["TrainingImage"].endswith("pytorch-training:2.4-gpu-py311")
    assert d["ResourceConfig"]["InstanceType"] == "ml.p4d.24xlarge" and d["ResourceConfig"]["InstanceCount"] == 2
    assert d["HyperParameters"]["sagemaker_torch_distributed_enabled"] == "true"
    payload = shim_payload(d["HyperParameters"])  # what the shipped launcher gets
    assert payload["argv"] == [
        "train.py",
        "--dataset",
        "synthetic",
        "--epochs",
        "2",
        "--data-dir",
        "/opt/ml/input/data/train",
    ]
    key = checkpoint_key(spec_from_dict(job(tmp_path)))  # the job's own folder: same training, same key
    assert d["CheckpointConfig"]["S3Uri"] == f"s3://{bucket}/cloudddp/checkpoints/tiny-sm/{key}"

    set_status(name, "InProgress", "Training")
    status = json.loads(cli("status", name, "--json").stdout)
    assert status["state"] == "running" and status["native_state"] == "InProgress/Training"

    # As the container writes them: the toolkit's own lines, and the program's after the launcher's rank prefix.
    put_logs(
        name, "algo-1", ["Invoking user script", "[rank0]:starting", "[rank0]:" + metric(1, train_loss=0.9)], 1_000
    )
    put_logs(name, "algo-2", ["[rank1]:hello from algo-2"], 1_001)
    follower = subprocess.Popen(
        [sys.executable, "-m", "cloudddp", "logs", name, "-f"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "CLOUDDDP_SAGEMAKER_POLL": "0.2"},
    )
    assert follower.stdout is not None
    lines = LineReader(follower.stdout)
    lines.wait_for("[algo-2/rank1] hello from algo-2")  # the follower is reading both hosts' streams
    put_logs(name, "algo-1", ["[rank0]:" + metric(2, train_loss=0.5, test_acc=0.8)], 5_000)
    lines.wait_for('"test_acc":0.8')  # arrived while following: the job has not ended
    assert follower.poll() is None
    set_status(name, "Completed", "Completed")
    assert follower.wait(timeout=120) == 0  # the job's end ends the follow
    out = lines.text()
    assert "[algo-1/rank0] starting" in out, out[-2000:]
    assert "[algo-1 runtime] Invoking user script" in out, out[-2000:]  # the toolkit's line, marked
    assert "[algo-2/rank1] hello from algo-2" in out, out[-2000:]  # the second host's stream is followed too
    metrics = [json.loads(line) for line in cli("metrics", name, "--json").stdout.splitlines()]
    assert [m["epoch"] for m in metrics] == [1, 2] and metrics[1]["test_acc"] == 0.8
    assert json.loads(cli("status", name, "--json").stdout)["state"] == "succeeded"


def test_second_submit_of_unchanged_code_and_data_uploads_nothing(tmp_path: Path) -> None:
    spec = spec_from_dict(job(tmp_path, name="repeat-sm"))
    backend = SageMakerBackend(records=RunDatabase(), token="a1")
    first = backend.render(spec)
    first_id = backend.launch(first)
    assert [u["kind"] for u in first.uploads] == ["code", "input"]
    assert backend.records.get(first_id).info["uploaded_bytes"][1] == 2048
    second = SageMakerBackend(records=RunDatabase(), token="a2")
    second_id = second.launch(second.render(spec))
    assert second.records.get(second_id).info["uploaded_bytes"] == [0, 0]


def test_a_retried_submit_does_not_start_a_second_job(tmp_path: Path) -> None:
    session = boto3.session.Session(region_name="us-east-1")
    creates = []
    session.events.register("before-call.sagemaker.CreateTrainingJob", lambda **kw: creates.append(1))
    backend = SageMakerBackend(records=RunDatabase(), session=session, token="same")
    plan = backend.render(spec_from_dict(job(tmp_path, name="idem-sm")))
    assert backend.launch(plan) == backend.launch(plan)  # the retry finds the job by its deterministic name
    assert len(creates) == 1


def test_throttling_5xx_and_a_lost_response_are_survived_without_a_duplicate(
    tmp_path: Path, aws_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def rule(target: str, n: int) -> str | None:
        if target == "CreateTrainingJob" and n == 1:
            return "drop"  # the job is created, the response never arrives
        if target == "DescribeTrainingJob" and n <= 2:
            return "throttle"
        if target.startswith("PUT") and n == 1:
            return "503"
        return None

    proxy = FaultProxy(aws_env, rule)
    with proxy.running() as url:
        monkeypatch.setenv("AWS_ENDPOINT_URL", url)
        backend = SageMakerBackend(records=RunDatabase(), token="faulty")
        name = backend.launch(backend.render(spec_from_dict(job(tmp_path, name="fault-sm"))))
    monkeypatch.setenv("AWS_ENDPOINT_URL", aws_env)
    assert proxy.seen["CreateTrainingJob"] == 2 and proxy.seen["DescribeTrainingJob"] >= 3
    assert proxy.in_use == [name]  # the retry met its own job, as SageMaker answers it, and that was success
    jobs = boto3.client("sagemaker").list_training_jobs(NameContains="fault-sm")["TrainingJobSummaries"]
    assert [j["TrainingJobName"] for j in jobs] == [name]


def test_the_rig_answers_a_second_job_of_one_name_as_sagemaker_does(tmp_path: Path, aws_env: str) -> None:
    """botocore reads the proxy's answer as SageMaker's: a ClientError ``ResourceInUse`` with SageMaker's words."""
    from botocore.exceptions import ClientError

    backend = SageMakerBackend(records=RunDatabase(), token="dup")
    request = backend.render(spec_from_dict(job(tmp_path, name="dup-sm"))).request
    with FaultProxy(aws_env).running() as url:
        sm = boto3.client("sagemaker", endpoint_url=url, region_name="eu-west-1")
        minimal = {k: request[k] for k in ("AlgorithmSpecification", "RoleArn", "OutputDataConfig")}
        minimal |= {"ResourceConfig": request["ResourceConfig"], "StoppingCondition": request["StoppingCondition"]}
        sm.create_training_job(TrainingJobName="dup-sm-once", **minimal)
        with pytest.raises(ClientError) as again:
            sm.create_training_job(TrainingJobName="dup-sm-once", **minimal)
    error = again.value.response
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400 and error["Error"]["Code"] == "ResourceInUse"
    assert error["Error"]["Message"] == (
        "Training job names must be unique within an AWS account and region, and a training job with this name "
        f"already exists (arn:aws:sagemaker:eu-west-1:{ACCOUNT_ID}:training-job/dup-sm-once)"
    )


def test_status_reaches_the_cli_for_each_state(tmp_path: Path) -> None:
    backend = SageMakerBackend(records=RunDatabase(), token="st")
    name = backend.launch(backend.render(spec_from_dict(job(tmp_path, name="states-sm"))))
    for native, secondary, expected in (
        ("InProgress", "Downloading", RunState.STARTING),
        ("InProgress", "Training", RunState.RUNNING),
        ("Failed", "Failed", RunState.FAILED),
        ("Stopped", "Stopped", RunState.CANCELLED),
    ):
        set_status(name, native, secondary)
        assert backend.status(name).state is expected


def test_a_stop_at_the_time_limit_is_the_jobs_limit_not_a_cancel(tmp_path: Path) -> None:
    backend = SageMakerBackend(records=RunDatabase(), token="tl")
    name = backend.launch(backend.render(spec_from_dict(job(tmp_path, name="limit-sm"))))
    for secondary, field in (
        ("MaxRuntimeExceeded", "limits.max_runtime"),
        ("MaxWaitTimeExceeded", "sagemaker.max_wait"),
    ):
        set_status(name, "Stopped", secondary)
        status = backend.status(name)
        assert (status.state, status.cause) == (RunState.FAILED, Cause.LIMIT), status
        assert "time limit" in status.message and field in status.message
    set_status(name, "Stopped", "Stopped")
    assert backend.status(name).cause is Cause.CANCELLED  # a stop someone asked for stays a cancel


def test_logs_and_metrics_read_every_hosts_stream_past_the_first_page(tmp_path: Path) -> None:
    """DescribeLogStreams answers 50 streams a page: a 52-host job's algo-9 and algo-52 sort after the 50th."""
    backend = SageMakerBackend(records=RunDatabase(), token="pg")
    name = backend.launch(backend.render(spec_from_dict(job(tmp_path, name="pages-sm"))))
    for host in range(1, 53):
        put_logs(name, f"algo-{host}", [f"[rank{8 * (host - 1)}]:hello from algo-{host}"], 1_000 + host)
    put_logs(name, "algo-9", ["[rank0]:" + metric(1, train_loss=0.25)], 2_000)
    set_status(name, "Completed", "Completed")
    sources = {line.source for line in backend.logs(name)}
    assert {f"algo-{h}/rank{8 * (h - 1)}" for h in (1, 9, 50, 51, 52)} <= sources, sorted(sources)
    assert [m.values["train_loss"] for m in backend.metrics(name)] == [0.25]


def test_doctor_checks_credentials_and_that_s3_inputs_exist(tmp_path: Path) -> None:
    spec_path = tmp_path / "job.json"
    data = job(tmp_path, name="doctor-sm")
    inputs = own_bucket(tmp_path) + "-in"  # empty until this test writes to it
    data["inputs"] = {"train": {"path": f"s3://{inputs}/cifar10/", "arg": "--data-dir"}}
    spec_path.write_text(json.dumps(data))
    boto3.client("s3").create_bucket(Bucket=inputs)
    missing = cli("doctor", str(spec_path), "-b", "sagemaker", "--json")
    checks = {c["name"]: c for c in json.loads(missing.stdout)["checks"]}
    assert missing.returncode == 2 and checks["AWS credentials"]["ok"] is True
    assert checks["input train reachable"]["ok"] is False and checks["input train reachable"]["fix"]
    boto3.client("s3").put_object(Bucket=inputs, Key="cifar10/data_batch_1", Body=b"x")
    ok = cli("doctor", str(spec_path), "-b", "sagemaker", "--json")
    assert {c["name"]: c for c in json.loads(ok.stdout)["checks"]}["input train reachable"]["ok"] is True


# -- S3 as an expert writes it ------------------------------------------------------------------------
def s3_calls(session: boto3.session.Session) -> list[tuple[str, dict]]:
    """Every S3 call made through ``session``: the operation and its parameters as the caller passed them."""
    calls: list[tuple[str, dict]] = []

    def record(params: dict, model: object, **_: object) -> None:
        calls.append((getattr(model, "name", "?"), dict(params)))

    session.events.register("before-parameter-build.s3", record)
    return calls


def test_the_default_bucket_is_created_in_eu_west_1_and_every_call_to_it_names_its_owner(tmp_path: Path) -> None:
    spec = job(tmp_path)
    spec["sagemaker"] = {**spec["sagemaker"], "region": "eu-west-1", "bucket": None, "image": None}
    session = boto3.session.Session(region_name="eu-west-1")
    calls = s3_calls(session)
    backend = SageMakerBackend(records=RunDatabase(), session=session, token="eu1")
    run_id = backend.launch(backend.render(spec_from_dict(spec)))
    account = boto3.client("sts").get_caller_identity()["Account"]
    bucket = f"sagemaker-eu-west-1-{account}"
    s3 = boto3.client("s3", region_name="eu-west-1")
    assert s3.get_bucket_location(Bucket=bucket)["LocationConstraint"] == "eu-west-1"
    to_bucket = [(op, params) for op, params in calls if params.get("Bucket") == bucket]
    assert {op for op, _ in to_bucket} >= {"CreateBucket", "HeadBucket", "HeadObject", "PutObject"}
    for op, params in to_bucket:
        if op != "CreateBucket":  # CreateBucket has no such parameter: it creates the bucket as this account's
            assert params.get("ExpectedBucketOwner") == account, (op, params)
    [create] = [params for op, params in to_bucket if op == "CreateBucket"]
    assert create["CreateBucketConfiguration"] == {"LocationConstraint": "eu-west-1"}
    assert boto3.client("sagemaker", region_name="eu-west-1").describe_training_job(TrainingJobName=run_id)


def test_a_code_object_that_does_not_hold_the_snapshot_is_replaced_never_run(tmp_path: Path) -> None:
    spec = spec_from_dict(job(tmp_path, name="planted-sm"))
    backend = SageMakerBackend(records=RunDatabase(), token="pl1")
    plan = backend.render(spec)
    [code] = [up for up in plan.uploads if up["kind"] == "code"]
    bucket, _, key = code["destination"].removeprefix("s3://").partition("/")
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=bucket)  # this test's own, new
    s3.put_object(Bucket=bucket, Key=key, Body=b"#!/bin/sh\necho planted\n")  # someone got there first
    run_id = backend.launch(plan)
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert hashlib.sha256(body).hexdigest() == code["sha256"]  # what the job runs is the snapshot
    assert backend.records.get(run_id).info["uploaded_bytes"][0] == len(body)
    again = SageMakerBackend(records=RunDatabase(), token="pl2")
    second = again.launch(again.render(spec))
    assert again.records.get(second).info["uploaded_bytes"][0] == 0  # the snapshot itself is reused


def test_uploads_use_the_output_kms_key(tmp_path: Path) -> None:
    spec = job(tmp_path, name="kms-sm")
    spec["sagemaker"] = {**spec["sagemaker"], "output_kms_key": "alias/cloudddp-test"}
    session = boto3.session.Session(region_name="us-east-1")
    calls = s3_calls(session)
    backend = SageMakerBackend(records=RunDatabase(), session=session, token="km1")
    backend.launch(backend.render(spec_from_dict(spec)))
    writes = [params for op, params in calls if op in ("PutObject", "CreateMultipartUpload")]
    assert writes
    for params in writes:
        assert params.get("SSEKMSKeyId") == "alias/cloudddp-test" and params["ServerSideEncryption"] == "aws:kms"


def test_a_non_secret_from_env_value_reaches_the_launcher_with_its_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.sagemaker_container import record_create_training_job

    monkeypatch.setenv("CLOUDDDP_TEST_RUN_TAG", "blue sky")
    spec = job(tmp_path, name="fromenv-sm", env={"RUN_TAG": {"from_env": "CLOUDDDP_TEST_RUN_TAG"}})
    session = boto3.session.Session(region_name="us-east-1")
    sent = record_create_training_job(session)
    backend = SageMakerBackend(records=RunDatabase(), session=session, token="fe1")
    plan = backend.render(spec_from_dict(spec))
    assert "blue sky" not in json.dumps(plan.request)  # the plan keeps the placeholder
    backend.launch(plan)
    [request] = sent
    assert request["Environment"]["RUN_TAG"] == "blue sky"
    assert shim_payload(request["HyperParameters"])["env"]["RUN_TAG"] == "blue sky"  # what the launcher sets


def test_a_secret_too_long_for_sagemakers_environment_is_refused_before_sending_and_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    canary = "long-secret-canary-" + "x" * 600
    monkeypatch.setenv("BIG_TOKEN", canary)
    spec = spec_from_dict(job(tmp_path, name="long-secret", env={"TOKEN": {"from_env": "BIG_TOKEN", "secret": True}}))
    backend = SageMakerBackend(records=RunDatabase(), token="ls")
    plan = backend.render(spec)  # render sees a placeholder: within the limits
    with pytest.raises(UserError) as refused:
        backend.launch(plan, checks=False)
    message = str(refused.value)
    assert "env.TOKEN" in message and "at most 512" in message and canary not in message
    names = [j["TrainingJobName"] for j in boto3.client("sagemaker").list_training_jobs()["TrainingJobSummaries"]]
    assert not any(n.startswith("long-secret") for n in names)  # nothing was sent
