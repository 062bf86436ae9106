"""Checkpoints and the final model on a mounted cloud output folder (Azure ML ``rw_mount``: blob storage
behind FUSE), where a rename is refused and a folder cannot be fsynced, and where a write can be torn.

The mount is imitated by patching ``os`` functions for paths under one folder (a unit test may stub);
the training itself is the real script, run in this process on the real digits data.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.support.cli import ROOT

sys.path.insert(0, str(ROOT / "src_train"))
import train

from ddptrain import checkpoint, storage


class FuseLikeMount:
    """Make ``folder`` behave like blobfuse: rename refused, fsync of a folder refused (EINVAL)."""

    def __init__(self, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.folder = str(folder)
        self.refused_renames = 0
        self.refused_dir_fsyncs = 0
        real_replace, real_fsync = os.replace, os.fsync

        def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
            if os.fspath(dst).startswith(self.folder):
                self.refused_renames += 1
                raise OSError(errno.EPERM, "Operation not permitted", os.fspath(dst))
            real_replace(src, dst)

        def fsync(fd: int) -> None:
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                self.refused_dir_fsyncs += 1
                raise OSError(errno.EINVAL, "Invalid argument")
            real_fsync(fd)

        monkeypatch.setattr(os, "replace", replace)
        monkeypatch.setattr(os, "fsync", fsync)


@pytest.fixture(autouse=True)
def _restore_sigterm() -> Iterator[None]:
    """The script installs its SIGTERM handler in this process; put pytest's back afterwards."""
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.fixture(autouse=True)
def _no_mlflow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def metric_epochs(stdout: str) -> list[int]:
    import json

    return [
        json.loads(line.split(" ", 1)[1])["epoch"]
        for line in stdout.splitlines()
        if line.startswith("CLOUDDDP_METRIC ") and "epoch_time" in line
    ]


def test_training_on_a_mount_that_refuses_rename_and_folder_fsync_checkpoints_resumes_and_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    mount = FuseLikeMount(tmp_path / "mnt", monkeypatch)
    (tmp_path / "mnt").mkdir()
    common = [
        "--dataset",
        "digits",
        "--batch-size",
        "256",
        "--checkpoint-dir",
        str(tmp_path / "mnt" / "ck"),
        "--model-dir",
        str(tmp_path / "mnt" / "model"),
    ]
    assert train.main([*common, "--epochs", "2"]) == 0
    out, err = capsys.readouterr()
    assert metric_epochs(out) == [1, 2], out  # training went on past the refused operations
    assert mount.refused_renames == 5 and mount.refused_dir_fsyncs == 5  # 2 checkpoints × 2 files + model.pt
    assert err.count("writing files in place") == 2, err  # told once per folder (checkpoints, model), not per file
    assert "Traceback" not in err
    assert [p.name for p in checkpoint.candidates(tmp_path / "mnt" / "ck")] == [
        "ckpt-e0002-s0000000.pt",
        "ckpt-e0001-s0000000.pt",
    ]
    found = checkpoint.load_latest(tmp_path / "mnt" / "ck")
    assert found is not None and found[0].name == "ckpt-e0002-s0000000.pt" and found[1]["global_step"] > 0
    exported = torch.load(tmp_path / "mnt" / "model" / "model.pt")
    assert all(torch.equal(exported[k], found[1]["model"][k]) for k in exported)  # the final model, complete
    assert not list((tmp_path / "mnt").rglob("*.tmp"))  # no temporary files left on the mount

    # A restarted job on the same mount resumes from the newest checkpoint and keeps going.
    assert train.main([*common, "--epochs", "3"]) == 0
    out, err = capsys.readouterr()
    assert "resumed from" in out and "at epoch 3," in out, out
    assert metric_epochs(out) == [3]


def _tear_writes_under(folder: Path, monkeypatch: pytest.MonkeyPatch, *, report_full: bool) -> None:
    """Writes in place under ``folder`` stop half-way: with an error (the mount lost its connection) or,
    with ``report_full``, silently (the mount said it wrote everything; the blob holds half)."""
    real_write = os.write

    def write(fd: int, data: bytes | memoryview) -> int:
        target = os.readlink(f"/proc/self/fd/{fd}")
        if not target.startswith(str(folder)) or target.endswith(".tmp") or len(data) < 1000:
            return real_write(fd, data)
        written = real_write(fd, bytes(data[: len(data) // 2]))
        if report_full:
            return len(data)
        raise OSError(errno.EIO, f"Input/output error after {written} bytes")

    monkeypatch.setattr(os, "write", write)


@pytest.mark.parametrize("report_full", [False, True], ids=["write-fails-midway", "write-silently-torn"])
def test_a_torn_checkpoint_write_is_reported_and_the_previous_checkpoint_still_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], report_full: bool
) -> None:
    FuseLikeMount(tmp_path, monkeypatch)
    first = checkpoint.save(tmp_path, 1, 0, {"x": torch.arange(1000)})
    assert first is not None
    _tear_writes_under(tmp_path, monkeypatch, report_full=report_full)
    assert checkpoint.save(tmp_path, 2, 0, {"x": torch.arange(2000)}) is None  # no exception: training goes on
    err = capsys.readouterr().err
    assert "checkpoint ckpt-e0002-s0000000.pt was not written" in err, err
    assert ("reads back different" in err) == report_full
    path, state = checkpoint.load_latest(tmp_path)  # type: ignore[misc]
    assert path == first and torch.equal(state["x"], torch.arange(1000))
    assert not (tmp_path / "ckpt-e0002-s0000000.pt").exists()  # the torn file is gone, not left to be skipped


def test_leftovers_of_a_killed_writer_are_skipped_and_then_cleaned_up(tmp_path: Path) -> None:
    checkpoint.save(tmp_path, 1, 0, {"x": torch.arange(3)})
    # Killed mid-write in place on a mount: half a payload, no checksum; and a temporary file elsewhere.
    (tmp_path / "ckpt-e0002-s0000000.pt").write_bytes(b"\x80\x02half a pickle")
    (tmp_path / ".ckpt-e0002-s0000000.pt.0a1b2c3d.tmp").write_bytes(b"partial")
    path, _ = checkpoint.load_latest(tmp_path)  # type: ignore[misc]
    assert path.name == "ckpt-e0001-s0000000.pt"
    checkpoint.save(tmp_path, 1, 5, {"x": torch.arange(4)})
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-e0001-s0000000.pt",
        "ckpt-e0001-s0000000.pt.sha256",
        "ckpt-e0001-s0000005.pt",
        "ckpt-e0001-s0000005.pt.sha256",
    ]


def test_on_a_normal_filesystem_every_file_is_renamed_into_place_and_the_folder_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    renamed: list[str] = []
    synced_dirs: list[str] = []
    real_replace, real_fsync = os.replace, os.fsync

    def replace(src: str, dst: str) -> None:
        assert Path(src).name.startswith(".") and Path(src).name.endswith(".tmp")
        renamed.append(Path(dst).name)
        real_replace(src, dst)

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            synced_dirs.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "fsync", fsync)
    path = checkpoint.save(tmp_path, 1, 0, {"x": torch.arange(3)})
    assert path is not None
    assert renamed == ["ckpt-e0001-s0000000.pt", "ckpt-e0001-s0000000.pt.sha256"]
    assert synced_dirs == [str(tmp_path)] * 2
    assert capsys.readouterr().err == ""
    assert storage.sha256_of(path) == checkpoint.digest_file(path).read_text()
