"""Carrying a checkpoint folder between two stores, local to local: what is carried and what is left out,
the verification of every file, a second carry that copies nothing, and a copy that streams."""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import os
import stat
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from cloudddp.backends.checkpoints.carry import carry, newest_complete
from cloudddp.backends.checkpoints.store import CHUNK, StoredFile
from cloudddp.backends.local import LocalBackend
from cloudddp.backends.local.checkpoint_store import LocalCheckpoints
from cloudddp.backends.plugins import spec_from_dict
from cloudddp.backends.sagemaker import SageMakerBackend
from cloudddp.backends.slurm import SlurmBackend
from cloudddp.errors import CloudDDPError
from tests.support.aws_emulator import ACCOUNT_ID, aws_environment, own_bucket
from tests.support.cli import FIXTURES
from tests.support.slurm_cluster import SlurmCluster
from tests.support.streams import Breaking

OLDER = "ckpt-e0001-s0000040.pt"
NEWEST = "ckpt-e0002-s0000010.pt"
TORN = "ckpt-e0003-s0000001.pt"  # no .sha256: a write cut short
CARRIED = {
    NEWEST,
    NEWEST + ".sha256",
    "files/metrics.json",  # a kept file
    "files/_root/etc/state.bin",
    "lightning_logs/version_0/checkpoints/epoch=1-step=20.ckpt",
    "checkpoint-500/trainer_state.json",
    "cloudddp-runs.jsonl",
    "notes/ckpt-e0001-s0000001.pt",  # not at the top: the script's own file, carried
}
LEFT_OUT = {
    OLDER,
    OLDER + ".sha256",
    TORN,
    ".lock",
    f".{NEWEST}.1a2b3c4d.tmp",
    "files/.metrics.json.tmp",
    ".cache/state.bin",  # inside a hidden folder, at the top or deeper: hidden too
    "notes/.git/objects/ab/cdef",
}


def shared_checkpoint(folder: Path, name: str, payload: bytes) -> None:
    """A checkpoint as ddptrain.checkpoint writes it: the payload, then its SHA-256 beside it."""
    (folder / name).write_bytes(payload)
    (folder / f"{name}.sha256").write_text(hashlib.sha256(payload).hexdigest())


def folder_of_a_run(folder: Path) -> Path:
    folder.mkdir()
    shared_checkpoint(folder, OLDER, os.urandom(3000))
    shared_checkpoint(folder, NEWEST, os.urandom(CHUNK + 12345))  # more than one chunk
    for name in (CARRIED | LEFT_OUT) - {OLDER, OLDER + ".sha256", NEWEST, NEWEST + ".sha256"}:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(os.urandom(100) + name.encode())
    return folder


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_the_newest_complete_checkpoint_kept_files_and_the_rest_are_carried_older_and_hidden_ones_are_not(
    tmp_path: Path,
) -> None:
    source = folder_of_a_run(tmp_path / "from")
    stores = LocalBackend()  # opened as a run's record names its folder
    carried = carry(
        stores.checkpoint_store({"checkpoints": str(source)}),
        stores.checkpoint_store({"checkpoints": str(tmp_path / "to" / "job" / "key")}),
    )
    target = tmp_path / "to" / "job" / "key"
    assert tree(target) == {name: data for name, data in tree(source).items() if name in CARRIED}
    assert set(carried.copied) == CARRIED and carried.skipped == ()
    assert set(carried.left_out) == LEFT_OUT
    assert carried.copied[-2:] == (NEWEST, NEWEST + ".sha256")  # the digest last: complete only once all is there
    assert carried.bytes == sum(len(data) for name, data in tree(source).items() if name in CARRIED)
    assert carried.checkpoint == carried.resumes_from == NEWEST and carried.position == (2, 10)
    assert f"resumes from {NEWEST} (epoch 2, step 10)" in carried.summary()
    assert stat.S_IMODE((target / NEWEST).stat().st_mode) == 0o600
    made = [target, target / "files", target / "files" / "_root", target / "files" / "_root" / "etc"]
    assert [stat.S_IMODE(folder.stat().st_mode) for folder in made] == [0o700] * 4


def test_a_checkpoint_that_does_not_match_its_sha256_is_refused_and_not_left_complete(tmp_path: Path) -> None:
    source = folder_of_a_run(tmp_path / "from")
    torn = bytearray((source / NEWEST).read_bytes())
    torn[CHUNK + 7] ^= 0x01  # one bit, in the second chunk
    (source / NEWEST).write_bytes(bytes(torn))
    with pytest.raises(CloudDDPError) as refused:
        carry(LocalCheckpoints(source), LocalCheckpoints(tmp_path / "to"))
    said = str(refused.value)
    assert NEWEST in said and str(source) in said and str(tmp_path / "to") in said and "corrupt" in said
    assert newest_complete(list(tree(tmp_path / "to"))) is None  # no .sha256 beside it at the target
    assert not (tmp_path / "to" / f"{NEWEST}.sha256").exists()


class Seen:
    """What a carry reports to the CLI's progress."""

    def __init__(self) -> None:
        self.advances: list[tuple[int, int | None]] = []

    def planned(self, plan: object) -> None: ...

    def step(self, description: str) -> None: ...

    def advance(self, description: str, done: int, total: int | None) -> None:
        self.advances.append((done, total))


def test_a_carry_reports_its_bytes_as_they_go_up_to_the_total(tmp_path: Path) -> None:
    source = folder_of_a_run(tmp_path / "from")
    seen = Seen()
    carried = carry(LocalCheckpoints(source), LocalCheckpoints(tmp_path / "to"), seen)
    done = [d for d, _ in seen.advances]
    assert done == sorted(done) and len(done) > len(carried.copied)  # the big checkpoint in more than one piece
    assert seen.advances[-1] == (carried.bytes, carried.bytes)


class Flipping(LocalCheckpoints):
    """A target whose writes change a byte on the way (a faulty disk, a proxy): what the read-back must catch."""

    def write(self, path: str, stream: IO[bytes]) -> None:
        super().write(path, stream)
        with (self.folder / path).open("r+b") as f:
            first = f.read(1)
            f.seek(0)
            f.write(bytes([first[0] ^ 0xFF]))


def test_a_target_that_holds_other_bytes_than_were_sent_is_an_error_naming_the_file_and_both_stores(
    tmp_path: Path,
) -> None:
    source = folder_of_a_run(tmp_path / "from")
    with pytest.raises(CloudDDPError, match="the target holds sha256") as refused:
        carry(LocalCheckpoints(source), Flipping(tmp_path / "to"))
    assert str(source) in str(refused.value) and str(tmp_path / "to") in str(refused.value)
    assert newest_complete(list(tree(tmp_path / "to"))) is None
    assert refused.value.args[0].split()[1] not in tree(tmp_path / "to")  # the file that failed is not left there


def test_a_second_carry_copies_nothing_and_a_changed_file_of_the_same_size_again(tmp_path: Path) -> None:
    source = folder_of_a_run(tmp_path / "from")
    first = carry(LocalCheckpoints(source), LocalCheckpoints(tmp_path / "to"))
    again = carry(LocalCheckpoints(source), LocalCheckpoints(tmp_path / "to"))
    assert again.copied == () and set(again.skipped) == set(first.copied) and again.bytes == 0
    kept = source / "files" / "metrics.json"
    kept.write_bytes(bytes(b ^ 0x55 for b in kept.read_bytes()))  # same size, other bytes
    third = carry(LocalCheckpoints(source), LocalCheckpoints(tmp_path / "to"))
    assert third.copied == ("files/metrics.json",) and (tmp_path / "to/files/metrics.json").read_bytes() == (
        kept.read_bytes()
    )


def test_a_newer_checkpoint_already_at_the_target_is_what_the_run_resumes_from_and_the_summary_says_so(
    tmp_path: Path,
) -> None:
    source = folder_of_a_run(tmp_path / "from")
    (tmp_path / "to").mkdir()
    shared_checkpoint(tmp_path / "to", "ckpt-e0009-s0000000.pt", b"ahead")
    carried = carry(LocalCheckpoints(source), LocalCheckpoints(tmp_path / "to"))
    assert carried.checkpoint == NEWEST and carried.resumes_from == "ckpt-e0009-s0000000.pt"
    assert f"newer than the carried {NEWEST}" in carried.summary()


class Listing(LocalCheckpoints):
    """A store that lists a name pointing outside its folder (an S3 key may be ``../x``)."""

    def files(self) -> list[StoredFile]:
        return [*super().files(), StoredFile("../outside", 3), StoredFile("a//b", 1)]


def test_a_listed_name_that_leaves_the_folder_is_left_out_and_a_store_refuses_it(tmp_path: Path) -> None:
    source = folder_of_a_run(tmp_path / "from")
    carried = carry(Listing(source), LocalCheckpoints(tmp_path / "to"))
    assert {"../outside", "a//b"} <= set(carried.left_out) and not (tmp_path / "outside").exists()
    with pytest.raises(CloudDDPError, match="not a file name inside"):
        LocalCheckpoints(tmp_path / "to").sha256("../from/" + NEWEST)


def test_carrying_a_64_mib_checkpoint_streams_it(tmp_path: Path) -> None:
    source = tmp_path / "from"
    source.mkdir()
    payload = os.urandom(64 << 20)
    shared_checkpoint(source, NEWEST, payload)
    del payload
    tracemalloc.start()
    try:
        carried = carry(LocalCheckpoints(source), LocalCheckpoints(tmp_path / "to"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert carried.bytes == (64 << 20) + 64
    assert peak < 4 * CHUNK, f"the carry held {peak} bytes at once"
    assert (tmp_path / "to" / NEWEST).stat().st_size == 64 << 20


class EndingEarly(LocalCheckpoints):
    """A source whose reads end early without an error (a connection closed cleanly mid-file)."""

    @contextlib.contextmanager
    def reader(self, path: str) -> Iterator[IO[bytes]]:
        with super().reader(path) as f:
            yield io.BytesIO(f.read(10))


def test_a_file_that_arrives_shorter_than_listed_is_an_error(tmp_path: Path) -> None:
    source = tmp_path / "from"
    (source / "files").mkdir(parents=True)
    (source / "files" / "state.json").write_bytes(os.urandom(100))
    with pytest.raises(CloudDDPError, match=r"files/state.json .*read 10 bytes of the 100 listed"):
        carry(EndingEarly(source), LocalCheckpoints(tmp_path / "to"))


def test_a_local_write_cut_short_leaves_the_file_as_it_was_and_no_temporary(tmp_path: Path) -> None:
    store = LocalCheckpoints(tmp_path / "to")
    with pytest.raises(OSError, match="went away"):
        store.write(f"files/{NEWEST}", Breaking())  # type: ignore[arg-type]
    assert list((tmp_path / "to" / "files").iterdir()) == []
    store.write("files/state.json", io.BytesIO(b"saved before"))
    with pytest.raises(OSError, match="went away"):
        store.write("files/state.json", Breaking())  # type: ignore[arg-type]
    assert [p.name for p in (tmp_path / "to" / "files").iterdir()] == ["state.json"]
    assert (tmp_path / "to" / "files" / "state.json").read_bytes() == b"saved before"


@pytest.mark.slow
def test_a_folder_carried_local_to_s3_to_the_slurm_workdir_and_back_is_the_same_bytes(
    moto_url: str, cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each hop opens its store as a backend's plan names it: SageMaker on moto, Slurm on the test cluster."""
    for key, value in aws_environment(moto_url).items():
        monkeypatch.setenv(key, value)
    code = {"dir": str(FIXTURES / "tinyjob"), "command": ["true"]}
    sagemaker = SageMakerBackend().render(
        spec_from_dict(
            {
                "name": "travels",
                "code": code,
                "sagemaker": {
                    "region": "us-east-1",
                    "role": f"arn:aws:iam::{ACCOUNT_ID}:role/SageMakerRole",
                    "bucket": own_bucket(tmp_path),
                    "instance_type": "ml.m5.4xlarge",
                    "image": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.4-cpu-py311",
                },
            }
        )
    )
    slurm = SlurmBackend().render(
        spec_from_dict({"name": "travels", "code": code, "slurm": {"workdir": str(tmp_path)}})
    )
    source = folder_of_a_run(tmp_path / "from")
    hops = [
        LocalCheckpoints(source),
        SageMakerBackend().checkpoint_store(sagemaker.target),
        SlurmBackend().checkpoint_store(slurm.target),
        LocalCheckpoints(tmp_path / "back"),
    ]
    for old, new in itertools.pairwise(hops):
        carried = carry(old, new)
        assert set(carried.copied) == CARRIED and carried.resumes_from == NEWEST, (old.location, new.location)
    assert tree(tmp_path / "back") == {name: data for name, data in tree(source).items() if name in CARRIED}
    digest = (source / f"{NEWEST}.sha256").read_text()
    assert [store.sha256(NEWEST) for store in hops] == [digest] * 4
