"""A training's checkpoint folder on Azure ML, opened as a run moving between backends opens it
(``Backend.checkpoint_store``): blobs of the workspace's datastore, on Azurite through the rig's workspace and the
backend's own transport; and a job of the rig writing its checkpoints there through its mounted output
(tests/support/azure_mounts.py), where the store finds them."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from cloudddp.backends.azureml import checkpoint_store
from cloudddp.backends.checkpoints.carry import carry
from cloudddp.backends.checkpoints.store import CHUNK, StoredFile
from cloudddp.backends.local.checkpoint_store import LocalCheckpoints
from cloudddp.backends.plugins import spec_from_dict
from cloudddp.errors import CloudDDPError, UserError
from tests.support import azure_nodes
from tests.support.azure_launchers import Datastores
from tests.support.azure_mounts import BlobMounts
from tests.support.azure_nodes import AzureNodes
from tests.support.azure_rig import WorkspaceModel, rig_backend
from tests.support.cli import ROOT
from tests.support.harnesses import AzureMLHarness
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


def digits_spec(tmp_path: Path, name: str, epochs: int, batch: int = 64, **checkpoint: Any) -> Any:
    overrides = dict(o.split("=", 1) for o in AzureMLHarness.overrides)
    data = {
        "name": name,
        "code": {"dir": str(ROOT / "src_train"), "entry": "train.py"},
        "resources": {"nodes": 1, "gpus_per_node": 0, "processes_per_node": 1, "spot": True},
        "checkpoint": {"every_epochs": 1, "resume": "auto", **checkpoint},
        "limits": {"max_runtime": "10m"},
        "azureml": {key.removeprefix("azureml."): value for key, value in overrides.items()},
    }
    data["code"]["args"] = [
        "--dataset",
        "digits",
        "--model",
        "cnn",
        "--epochs",
        str(epochs),
        "--batch-size",
        str(batch),
    ]
    return spec_from_dict(data, base_dir=tmp_path)


class OneWay(io.RawIOBase):
    """A stream that can only be read (a pipe, another store's download): its length cannot be learnt."""

    def __init__(self, data: bytes) -> None:
        self.data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self.data.readinto(buffer)


def blobs(model: WorkspaceModel, prefix: str) -> dict[str, bytes]:
    """The blobs under ``prefix`` in the workspace's default container, read directly from Azurite."""
    client = model.container_client()
    return {b.name: client.download_blob(b.name).readall() for b in client.list_blobs(name_starts_with=prefix)}


def test_the_store_writes_lists_reads_and_hashes_blobs_under_the_plans_folder(
    model: WorkspaceModel, tmp_path: Path
) -> None:
    backend = rig_backend(model, token="store1")
    plan = backend.render(digits_spec(tmp_path, "stored", 1))
    folder = plan.target.checkpoints
    assert folder.startswith("azureml://datastores/workspaceblobstore/paths/cloudddp/checkpoints/stored/")
    prefix = folder.removeprefix("azureml://datastores/workspaceblobstore/paths/")
    store = backend.checkpoint_store(plan.target)
    assert store.location == folder and store.files() == []  # nothing there yet

    big = os.urandom(2 * CHUNK + 123)
    store.write("ckpt-e0001-s0000010.pt", OneWay(big))
    small = tmp_path / "small.sha256"
    small.write_bytes(hashlib.sha256(big).hexdigest().encode())
    with open(small, "rb") as stream:  # a file, whose length the SDK can learn
        store.write("ckpt-e0001-s0000010.pt.sha256", stream)
    store.write("files/nested/snapshot.pt", OneWay(b"kept"))

    assert sorted(store.files(), key=lambda f: f.path) == [
        StoredFile("ckpt-e0001-s0000010.pt", len(big)),
        StoredFile("ckpt-e0001-s0000010.pt.sha256", 64),
        StoredFile("files/nested/snapshot.pt", 4),
    ]
    assert blobs(model, prefix)[prefix + "ckpt-e0001-s0000010.pt"] == big  # where the job's mount puts it
    with store.reader("ckpt-e0001-s0000010.pt") as stream:
        pieces = [stream.read(CHUNK) for _ in range(4)]
    assert [len(p) for p in pieces] == [CHUNK, CHUNK, 123, 0] and b"".join(pieces) == big
    assert store.sha256("ckpt-e0001-s0000010.pt") == hashlib.sha256(big).hexdigest()
    assert store.sha256("files/nested/snapshot.pt") == hashlib.sha256(b"kept").hexdigest()
    # Sent in blocks of CHUNK, committed by one last request: the blob was never there half written.
    blocks = model.container_client().get_blob_client(prefix + "ckpt-e0001-s0000010.pt").get_block_list()[0]
    assert [b.size for b in blocks] == [CHUNK, CHUNK, 123]

    store.write("files/nested/snapshot.pt", OneWay(b"written again"))
    with store.reader("files/nested/snapshot.pt") as stream:
        assert stream.read() == b"written again"


def test_the_store_lists_only_its_own_folder_and_no_folder_markers(model: WorkspaceModel, tmp_path: Path) -> None:
    backend = rig_backend(model, token="store2")
    plan = backend.render(digits_spec(tmp_path, "mine", 1, key="k"))
    prefix = plan.target.checkpoints.removeprefix("azureml://datastores/workspaceblobstore/paths/")
    client = model.container_client()
    client.upload_blob(prefix.rstrip("/") + "2/other.pt", b"a sibling folder's")  # .../k2/, not .../k/
    client.upload_blob(prefix + "sub", b"", metadata={"hdi_isfolder": "true"})  # a folder, as blobfuse marks one
    client.upload_blob(prefix + "sub/ckpt.pt", b"mine")
    store = backend.checkpoint_store(plan.target)
    assert store.files() == [StoredFile("sub/ckpt.pt", 4)]
    missing = dataclasses.replace(plan.target, checkpoints=plan.target.checkpoints.replace("/mine/", "/nobody/"))
    assert backend.checkpoint_store(missing).files() == []


def test_a_folder_outside_a_blob_datastore_is_refused_saying_why(model: WorkspaceModel, tmp_path: Path) -> None:
    backend = rig_backend(model, token="store3")
    target = backend.render(digits_spec(tmp_path, "elsewhere", 1)).target
    on_share = dataclasses.replace(target, checkpoints="azureml://datastores/workspacefilestore/paths/ckpt/")
    with pytest.raises(
        CloudDDPError, match=r"datastore workspacefilestore \(AzureFileDatastore\), which is not a blob container"
    ):
        backend.checkpoint_store(on_share)
    with pytest.raises(UserError, match="azureml://datastores/<datastore>/paths/<folder>/"):
        backend.checkpoint_store(dataclasses.replace(target, checkpoints="https://example.org/ckpt/"))


def test_the_rigs_mount_shows_the_blobs_when_a_job_starts_and_uploads_what_its_processes_wrote(
    model: WorkspaceModel, tmp_path: Path
) -> None:
    uri = "azureml://datastores/workspaceblobstore/paths/runs/out/"
    model.container_client().upload_blob("runs/out/old.pt", b"an earlier attempt's")
    mounts = BlobMounts(model, tmp_path / "blob")
    left = mounts.folder(uri) / "left-here.pt"  # on this machine only, never uploaded: a node does not see it
    left.parent.mkdir(parents=True)
    left.write_bytes(b"stale")
    folder = mounts.output(uri)
    assert {p.name: p.read_bytes() for p in folder.rglob("*")} == {"old.pt": b"an earlier attempt's"}

    (folder / "deep").mkdir()
    (folder / "deep" / "new.pt").write_bytes(b"new")
    (folder / "old.pt").unlink()
    mounts.sync(settled_only=True)  # a file seen for the first time may still be being written: not yet
    assert blobs(model, "runs/") == {}
    mounts.sync(settled_only=True)
    assert blobs(model, "runs/") == {"runs/out/deep/new.pt": b"new"}
    (folder / "deep" / "new.pt").write_bytes(b"newer")
    mounts.sync()  # the attempt's end: everything, at once
    assert blobs(model, "runs/") == {"runs/out/deep/new.pt": b"newer"}


@pytest.mark.timeout(300)
def test_a_preempted_attempts_checkpoints_are_in_the_workspaces_blobs_where_the_plan_names_them(
    model: WorkspaceModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = rig_backend(model, token="store4")
    plan = backend.render(digits_spec(tmp_path, "preempted", 200, batch=8))  # epochs of seconds, not a fraction
    name = backend.launch(plan)
    store = backend.checkpoint_store(plan.target)
    nodes = AzureNodes(model, name, tmp_path / "attempt1", Datastores(tmp_path / "blob"))
    try:  # uploaded while the job runs, once written (blobfuse uploads a file when it is closed); any epoch's: the
        # script keeps its newest two, so a fast epoch's checkpoint may be gone before it has settled to be uploaded
        wait_until(lambda: any(f.path.endswith(".pt.sha256") for f in store.files()), 180, poll=0.2)
        assert nodes.started.procs[0].poll() is None, "the job ended before it was preempted"
        monkeypatch.setattr(azure_nodes, "UPLOAD_EVERY", 10**9)  # from now on, only the attempt's end uploads
        paused = time.time_ns()
        preempted = nodes.preempt()
    finally:
        nodes.stop()
    assert "stopping on SIGTERM" in preempted.logs[0] and "checkpoint written" in preempted.logs[0], (
        preempted.describe()
    )

    local = {p.relative_to(nodes.checkpoints).as_posix(): p for p in nodes.checkpoints.rglob("*") if p.is_file()}
    assert any(p.stat().st_mtime_ns > paused for p in local.values()), "nothing was written on the way out"
    assert {f.path: f.size for f in store.files()} == {n: p.stat().st_size for n, p in local.items()}
    written = [n for n in local if re.fullmatch(r"ckpt-e\d{4}-s\d{7}\.pt", n)]
    assert written and all(f"{n}.sha256" in local for n in written), sorted(local)
    for checkpoint in written:  # every checkpoint whole, by the digest its writer put next to it
        with store.reader(f"{checkpoint}.sha256") as digest:
            assert store.sha256(checkpoint) == digest.read().decode().strip()


def test_a_file_over_the_block_count_of_one_chunk_blocks_is_carried_in_larger_blocks_within_the_count(
    model: WorkspaceModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A block blob's block count scaled down (at most 3 blocks): a file of ten chunks and a byte, carried from a
    folder, goes in three blocks of 4 MiB, the last one shorter."""
    monkeypatch.setattr(checkpoint_store, "BLOCKS", 3)
    backend = rig_backend(model, token="store5")
    plan = backend.render(digits_spec(tmp_path, "large", 1))
    prefix = plan.target.checkpoints.removeprefix("azureml://datastores/workspaceblobstore/paths/")
    here = tmp_path / "here"
    here.mkdir()
    data = os.urandom(10 * CHUNK + 1)
    (here / "model.ckpt").write_bytes(data)
    assert carry(LocalCheckpoints(here), backend.checkpoint_store(plan.target)).bytes == len(data)
    blob = model.container_client().get_blob_client(prefix + "model.ckpt")
    assert [b.size for b in blob.get_block_list()[0]] == [4 << 20, 4 << 20, 2 * CHUNK + 1]
    assert blob.download_blob().readall() == data


def test_a_carry_to_blobs_verifies_each_block_on_write_and_reads_nothing_back(
    model: WorkspaceModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each block goes with its MD5, which the service checks: the carry reads no byte of the blob back."""
    opened: list[str] = []
    reader = checkpoint_store.BlobCheckpoints.reader

    def counted(self: Any, path: str) -> Any:
        opened.append(path)
        return reader(self, path)

    monkeypatch.setattr(checkpoint_store.BlobCheckpoints, "reader", counted)
    backend = rig_backend(model, token="store6")
    plan = backend.render(digits_spec(tmp_path, "verified", 1))
    here = tmp_path / "here"
    here.mkdir()
    data = os.urandom(3 * CHUNK + 5)
    (here / "model.ckpt").write_bytes(data)
    store = backend.checkpoint_store(plan.target)
    assert carry(LocalCheckpoints(here), store).copied == ("model.ckpt",)
    assert opened == []  # verified on write: nothing read back
    with store.reader("model.ckpt") as stream:
        assert stream.read() == data
