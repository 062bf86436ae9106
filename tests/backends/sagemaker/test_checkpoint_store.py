"""A SageMaker training's checkpoint folder in S3 as a checkpoint store, against moto as a real HTTP server:
carried there from a local folder and back, byte for byte, into the default bucket a plan names with the account
still to be bound, a file larger than one part included; encrypted with the spec's KMS key."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import socket
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from cloudddp.backends.checkpoints.carry import carry
from cloudddp.backends.local.checkpoint_store import LocalCheckpoints
from cloudddp.backends.plugins import spec_from_dict
from cloudddp.backends.sagemaker import SageMakerBackend, checkpoint_store
from cloudddp.backends.sagemaker.checkpoint_store import IN_FLIGHT, PART, _Parts, sent_checksum
from tests.support.aws_emulator import (
    ACCOUNT_ID,
    FaultProxy,
    aws_environment,
    own_bucket,
    use_emulator,
)
from tests.support.cli import ROOT
from tests.support.ports import free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

NEWEST = "ckpt-e0004-s0000020.pt"


@pytest.fixture(autouse=True)
def aws_env(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    return use_emulator(monkeypatch, moto_url)


def spec(tmp_path: Path, **sagemaker: Any) -> Any:
    return spec_from_dict(
        {
            "name": f"carry-{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:10]}",
            "code": {"dir": str(ROOT / "src_train"), "entry": "train.py", "args": ["--dataset", "synthetic"]},
            "resources": {"nodes": 1, "gpus_per_node": 8},
            "sagemaker": {
                "region": "us-east-1",
                "role": f"arn:aws:iam::{ACCOUNT_ID}:role/SageMakerRole",
                "instance_type": "ml.p4d.24xlarge",
                "image": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.4-gpu-py311",
                **sagemaker,
            },
        }
    )


def run_folder(folder: Path) -> dict[str, bytes]:
    """A checkpoint folder: the shared script's newest checkpoint (larger than one upload part), a kept file."""
    folder.mkdir()
    payload = os.urandom(PART + 3 * 1024 * 1024)
    files = {
        NEWEST: payload,
        f"{NEWEST}.sha256": hashlib.sha256(payload).hexdigest().encode(),
        "files/state.json": b'{"seen": 3}',
    }
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return files


def test_a_checkpoint_folder_carried_to_the_default_bucket_and_back_is_the_same_bytes(tmp_path: Path) -> None:
    backend = SageMakerBackend()
    plan = backend.render(spec(tmp_path))
    assert "{ACCOUNT}" in plan.target.checkpoints  # as a run's record keeps it: bound by the store, from STS
    files = run_folder(tmp_path / "here")
    store = backend.checkpoint_store(plan.target)
    bucket = f"sagemaker-us-east-1-{ACCOUNT_ID}"
    assert store.location.startswith(f"s3://{bucket}/cloudddp/checkpoints/")

    there = carry(LocalCheckpoints(tmp_path / "here"), store)
    assert set(there.copied) == set(files) and there.bytes == sum(map(len, files.values()))
    s3 = boto3.client("s3")
    prefix = store.location.removeprefix(f"s3://{bucket}/")
    for name, data in files.items():
        assert s3.get_object(Bucket=bucket, Key=f"{prefix}/{name}")["Body"].read() == data, name
    small = s3.head_object(Bucket=bucket, Key=f"{prefix}/files/state.json", ChecksumMode="ENABLED")
    assert small.get("ChecksumSHA256"), small  # one part: S3 keeps the SHA-256 the store answers from
    assert store.sha256("files/state.json") == hashlib.sha256(files["files/state.json"]).hexdigest()
    assert store.sha256(NEWEST) == files[f"{NEWEST}.sha256"].decode()  # several parts: read back

    assert carry(LocalCheckpoints(tmp_path / "here"), store).copied == ()  # the second carry copies nothing
    back = carry(store, LocalCheckpoints(tmp_path / "back"))
    assert back.resumes_from == NEWEST
    assert {name: (tmp_path / "back" / name).read_bytes() for name in files} == files


def test_a_carry_into_a_bucket_with_a_kms_key_encrypts_every_file_with_it(tmp_path: Path) -> None:
    key = boto3.client("kms").create_key()["KeyMetadata"]["Arn"]
    bucket = own_bucket(tmp_path)
    backend = SageMakerBackend()
    plan = backend.render(spec(tmp_path, bucket=bucket, output_kms_key=key))
    run_folder(tmp_path / "here")
    store = backend.checkpoint_store(plan.target)
    carry(LocalCheckpoints(tmp_path / "here"), store)
    s3 = boto3.client("s3")
    prefix = store.location.removeprefix(f"s3://{bucket}/")
    for name in (NEWEST, "files/state.json"):
        head = s3.head_object(Bucket=bucket, Key=f"{prefix}/{name}")
        assert (head.get("ServerSideEncryption"), head.get("SSEKMSKeyId")) == ("aws:kms", key), name


@pytest.fixture
def moto_elsewhere(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """moto in a process of its own: what this process allocates is then only the store's."""
    port = free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: socket_open(port), timeout=30)
        for key, value in aws_environment(url).items():
            monkeypatch.setenv(key, value)
        yield url
    finally:
        server.kill()
        server.wait()


def socket_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_a_carry_to_s3_holds_a_few_parts_in_memory_not_the_file(moto_elsewhere: str, tmp_path: Path) -> None:
    size = 16 * PART
    here = tmp_path / "here"
    here.mkdir()
    with (here / "model.ckpt").open("wb") as f:
        for _ in range(16):
            f.write(os.urandom(PART))
    store = SageMakerBackend().checkpoint_store({"region": "us-east-1", "checkpoints": "s3://carry-memory/c/job/key"})
    tracemalloc.start()
    try:
        carried = carry(LocalCheckpoints(here), store)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert carried.bytes == size
    assert peak < (IN_FLIGHT + 2) * PART, f"the upload held {peak >> 20} MiB of a {size >> 20} MiB file"


def test_a_file_over_the_part_count_of_16_mib_parts_is_carried_in_larger_parts_within_the_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S3's limits scaled down (parts of 5 MiB, S3's least, at most 3 of them): a file of four parts and a byte
    goes in three parts of 7 MiB, streamed from a source that only reads forward."""
    monkeypatch.setattr(checkpoint_store, "PART", 5 << 20)
    monkeypatch.setattr(checkpoint_store, "PARTS", 3)
    here = tmp_path / "here"
    here.mkdir()
    data = os.urandom(4 * (5 << 20) + 1)
    (here / "model.ckpt").write_bytes(data)
    bucket = own_bucket(tmp_path)
    store = SageMakerBackend().checkpoint_store({"region": "us-east-1", "checkpoints": f"s3://{bucket}/c/job/key"})
    assert carry(LocalCheckpoints(here), store).bytes == len(data)
    s3 = boto3.client("s3")
    head = s3.head_object(Bucket=bucket, Key="c/job/key/model.ckpt")
    assert head["ETag"].strip('"').endswith("-3"), head["ETag"]  # a multipart upload's ETag counts its parts
    assert s3.head_object(Bucket=bucket, Key="c/job/key/model.ckpt", PartNumber=1)["ContentLength"] == 7 << 20
    assert s3.get_object(Bucket=bucket, Key="c/job/key/model.ckpt")["Body"].read() == data


def test_a_carry_to_s3_verifies_on_write_and_reads_nothing_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S3 checks each part's SHA-256 as it arrives; the write compares S3's composite checksum of the object with
    the one of what was sent: no byte of the file is read back (no GetObject), through a proxy that sees them all."""
    monkeypatch.setattr(checkpoint_store, "PART", 5 << 20)
    here = tmp_path / "here"
    here.mkdir()
    files = {"model.ckpt": os.urandom(2 * (5 << 20) + 7), "small.json": b"{}"}  # three parts; one request
    for name, data in files.items():
        (here / name).write_bytes(data)
    bucket = own_bucket(tmp_path)
    proxy = FaultProxy(os.environ["AWS_ENDPOINT_URL"])
    with proxy.running() as url:
        monkeypatch.setenv("AWS_ENDPOINT_URL", url)
        store = SageMakerBackend().checkpoint_store({"region": "us-east-1", "checkpoints": f"s3://{bucket}/c/k"})
        assert carry(LocalCheckpoints(here), store).bytes == sum(map(len, files.values()))
    reads = [target for target, _, _ in proxy.sent if target.startswith(f"GET /{bucket}/c/k/")]
    assert reads == [], reads
    assert any(target == f"HEAD /{bucket}/c/k/model.ckpt" for target, _, _ in proxy.sent)  # S3's checksum asked
    s3 = boto3.client("s3", endpoint_url=proxy.upstream)
    assert s3.get_object(Bucket=bucket, Key="c/k/model.ckpt")["Body"].read() == files["model.ckpt"]


def test_a_checksum_that_is_not_the_one_of_what_was_sent_asks_for_a_read_back() -> None:
    data = os.urandom(3000)
    sent = _Parts(io.BytesIO(data), 1024)
    assert sent.read() == data and len(sent.digests()) == 3
    composite = base64.b64encode(hashlib.sha256(b"".join(sent.digests())).digest()).decode()
    whole = base64.b64encode(hashlib.sha256(data).digest()).decode()
    assert sent_checksum({"ChecksumSHA256": f"{composite}-3", "ETag": '"x-3"'}, sent)  # S3's form
    assert sent_checksum({"ChecksumSHA256": composite, "ETag": '"x-3"'}, sent)  # moto's
    assert not sent_checksum({"ChecksumSHA256": f"{composite}-4", "ETag": '"x-4"'}, sent)  # another part count
    assert not sent_checksum({"ChecksumSHA256": whole, "ETag": '"x-3"'}, sent)  # not the parts' checksum
    assert not sent_checksum({"ETag": '"x-3"'}, sent)  # none at all
    assert sent_checksum({"ChecksumSHA256": whole, "ETag": '"x"'}, sent)  # one request: the whole's
