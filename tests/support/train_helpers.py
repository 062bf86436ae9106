"""Running the shared training script for real in tests: plainly or under torchrun."""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from tests.support.cli import ROOT
from tests.support.ports import free_port

TRAIN = ROOT / "src_train" / "train.py"


def torchrun_argv(nproc: int, *args: str, max_restarts: int = 0) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc-per-node",
        str(nproc),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{free_port()}",
        "--max-restarts",
        str(max_restarts),
        str(TRAIN),
        *args,
    ]


def train(
    nproc: int, *args: str, cwd: Path, timeout: float = 240, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    argv = torchrun_argv(nproc, *args) if nproc > 1 else [sys.executable, str(TRAIN), *args]
    return subprocess.run(
        argv,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "", **(env or {})},
    )


def write_cifar10_batches(
    folder: Path, train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray]
) -> None:
    """Write arrays in the real CIFAR-10 python format (``data_batch_1..5``, ``test_batch``)."""
    folder.mkdir(parents=True, exist_ok=True)
    chunks = np.array_split(np.arange(len(train[1])), 5)
    for i, idx in enumerate(chunks, 1):
        blob = {
            b"batch_label": f"training batch {i} of 5".encode(),
            b"labels": train[1][idx].tolist(),
            b"data": train[0][idx].reshape(len(idx), -1),
            b"filenames": [b"x.png"] * len(idx),
        }
        (folder / f"data_batch_{i}").write_bytes(pickle.dumps(blob, protocol=2))
    blob = {
        b"batch_label": b"testing batch 1 of 1",
        b"labels": test[1].tolist(),
        b"data": test[0].reshape(len(test[1]), -1),
        b"filenames": [b"x.png"] * len(test[1]),
    }
    (folder / "test_batch").write_bytes(pickle.dumps(blob, protocol=2))


def png_bytes(image: np.ndarray) -> bytes:
    """An (H, W, 3) uint8 array as an 8-bit RGB PNG (standard library only: no filter, zlib)."""
    height, width, _ = image.shape
    chunk = lambda kind, body: (  # noqa: E731
        struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    )
    rows = b"".join(b"\x00" + image[y].tobytes() for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def write_image_folder(root: Path, train_per_class: int, test_per_class: int, size: int = 32) -> None:
    """A CIFAR-10-shaped folder of PNG files, ``train/<class>/*.png`` and ``test/<class>/*.png``, 10 classes whose
    images differ in colour (learnable), with noise."""
    rng = np.random.default_rng(0)
    for split, count in (("train", train_per_class), ("test", test_per_class)):
        for label in range(10):
            folder = root / split / f"class{label}"
            folder.mkdir(parents=True, exist_ok=True)
            base = np.array([label * 25, 255 - label * 25, (label * 70) % 256], dtype=np.float64)
            for i in range(count):
                noise = rng.integers(0, 60, (size, size, 3))
                image = np.clip(base * 0.75 + noise, 0, 255).astype(np.uint8)
                (folder / f"{i:04d}.png").write_bytes(png_bytes(image))


def assert_every_step_once(records: list[Any], epochs: int) -> None:
    """Each step of each epoch of the shared script ran exactly once over ``records`` (the metric records of a run
    and its resumptions, in order; ``--log-every 1``): a step's id is (epoch, step within the epoch), read from
    its global step and the epoch its record names. A resume that repeated or skipped part of an epoch keeps the
    global counter contiguous but puts an epoch's steps past its end (or short of it)."""
    records = [r for r in records if "test_acc" not in r.values]
    per_epoch = next(r.step for r in records if r.epoch == 1 and "epoch_time" in r.values)
    assert [r.step for r in records if "epoch_time" in r.values] == [e * per_epoch for e in range(1, epochs + 1)]
    ids = [(r.epoch, r.step - (r.epoch - 1) * per_epoch) for r in records if "epoch_time" not in r.values]
    expected = [(e, i) for e in range(1, epochs + 1) for i in range(1, per_epoch + 1)]
    assert ids == expected, sorted(set(expected) ^ set(ids))[:10]
