"""The streaming data path (feed.py): a ``DataLoader`` with workers over a ``DistributedSampler``, for folders of
image files and the in-memory datasets, with the order and resume rules that keep a resumed run bitwise exact."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.support.cli import ROOT
from tests.support.train_helpers import png_bytes, torchrun_argv, train, write_image_folder

sys.path.insert(0, str(ROOT / "src_train"))
from ddptrain import images
from ddptrain.distributed import Context
from ddptrain.feed import EpochBatches

STEP = re.compile(r'CLOUDDDP_METRIC \{"epoch":1,"step":(\d+)')


def context(rank: int, world: int) -> Context:
    return Context(rank, rank, world, world, torch.device("cpu"), "gloo" if world > 1 else None)


def test_each_epoch_has_its_own_order_a_resume_skips_exactly_the_batches_done_and_the_ranks_never_overlap() -> None:
    whole = [list(EpochBatches(103, 5, 10, 7, context(r, 2))) for r in range(2)]
    assert all(len(b) == 10 and all(len(batch) == 5 for batch in b) for b in whole)
    flat = [i for b in whole for batch in b for i in batch]
    assert len(set(flat)) == len(flat) == 100  # disjoint shards, no sample twice in an epoch
    for rank in range(2):
        batches = EpochBatches(103, 5, 10, 7, context(rank, 2))
        batches.position(3, 0)
        epoch3 = list(batches)
        assert epoch3 != whole[rank]  # every epoch its own order...
        batches.position(3, 4)
        assert list(batches) == epoch3[4:] and len(batches) == 6  # ...and a resume at step 4 skips exactly 4 batches
        batches.position(0, 0)
        assert list(batches) == whole[rank]  # the same on every restart


def test_images_read_without_pillow_equal_pillows_reading(tmp_path: Path) -> None:
    """The numpy PNG decoder (for images without Pillow) against Pillow's, on files Pillow wrote with every filter."""
    from PIL import Image

    rng = np.random.default_rng(0)
    gradient = np.add.outer(np.arange(32), np.arange(32)).astype(np.uint8)
    for name, array in {
        "noise-rgb": rng.integers(0, 256, (17, 23, 3), dtype=np.uint8),
        "gradient-rgb": np.stack([gradient, gradient.T, 255 - gradient], axis=2),
        "gradient-grey": gradient,
        "rgba": rng.integers(0, 256, (9, 11, 4), dtype=np.uint8),
    }.items():
        path = tmp_path / f"{name}.png"
        Image.fromarray(array).save(path)
        assert np.array_equal(images._decode_png(path).squeeze(), array), name
        assert torch.equal(
            images.read_image(path),
            torch.from_numpy(
                np.ascontiguousarray((array if array.ndim == 3 else array[:, :, None]).transpose(2, 0, 1))
            ),
        )
    plain = tmp_path / "plain.png"
    plain.write_bytes(png_bytes(rng.integers(0, 256, (4, 5, 3), dtype=np.uint8)))
    assert images._decode_png(plain).shape == (4, 5, 3)


def test_an_image_of_another_size_is_refused_naming_the_file(tmp_path: Path) -> None:
    write_image_folder(tmp_path, 2, 1)
    odd = tmp_path / "train" / "class3" / "0001.png"
    odd.write_bytes(png_bytes(np.zeros((16, 32, 3), dtype=np.uint8)))
    result = train(1, "--dataset", "imagefolder", "--data-dir", str(tmp_path), "--data-path", "device", cwd=tmp_path)
    assert result.returncode == 2 and "class3/0001.png is (3, 16, 32)" in result.stderr, result.stderr[-2000:]


@pytest.mark.slow
def test_both_data_paths_train_bitwise_alike_on_an_in_memory_set(tmp_path: Path) -> None:
    args = ["--dataset", "digits", "--epochs", "1", "--deterministic", "--checkpoint-every", "0", "--batch-size", "32"]
    for path in ("device", "stream"):
        run = train(2, *args, "--data-path", path, "--workers", "2", "--model-dir", str(tmp_path / path), cwd=tmp_path)
        assert run.returncode == 0, run.stderr[-3000:]
    a, b = (torch.load(tmp_path / p / "model.pt") for p in ("device", "stream"))
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_cifar10_shaped_png_files_train_with_2_workers_per_rank_and_a_stop_resumes_exactly(tmp_path: Path) -> None:
    """A CIFAR-10-shaped folder of PNG files, 1×2 under real torchrun, ``--workers 2``; a
    SIGTERM to the launcher mid-epoch (torchrun signals its ranks' process groups: the workers must survive it
    until their rank has checkpointed), then a resumed run ends with the uninterrupted run's parameters, bitwise."""
    write_image_folder(tmp_path / "cifar", 4, 2)  # 40 training images: 10 steps per epoch at 2 per rank
    common = ["--dataset", "imagefolder", "--data-dir", str(tmp_path / "cifar"), "--workers", "2"]
    common += ["--batch-size", "2", "--epochs", "3", "--deterministic", "--log-every", "1"]
    whole = train(
        2, *common, "--checkpoint-dir", str(tmp_path / "ck0"), "--model-dir", str(tmp_path / "a"), cwd=tmp_path
    )
    assert whole.returncode == 0, whole.stderr[-3000:]

    resumed = [*common, "--checkpoint-dir", str(tmp_path / "ck"), "--model-dir", str(tmp_path / "b")]
    log = tmp_path / "stopped.log"
    with log.open("w") as out:
        launcher = subprocess.Popen(torchrun_argv(2, *resumed), cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while not any(int(s) >= 3 for s in STEP.findall(log.read_text())) and time.monotonic() < deadline:
            assert launcher.poll() is None, log.read_text()[-3000:]
            time.sleep(0.05)
        launcher.send_signal(signal.SIGTERM)
        launcher.wait(timeout=60)
    stopped = log.read_text()
    where = re.search(r"stopping on SIGTERM at epoch 1, step (\d+); checkpoint written", stopped)
    assert where and "DataLoader worker" not in stopped, stopped[-3000:]
    again = train(2, *resumed, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"at epoch 1, step {where.group(1)} " in again.stdout, again.stdout[-2000:]
    a, b = (torch.load(tmp_path / p / "model.pt") for p in ("a", "b"))
    assert all(torch.equal(a[k], b[k]) for k in a)
