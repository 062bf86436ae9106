"""The shared script's two data paths side by side (src_train/ddptrain/feed.py): images/s of the device path
(the whole dataset on the device, batches gathered there) and of the stream path (a ``DataLoader`` with
``--workers`` per rank reading each batch), on an in-memory set (synthetic, CIFAR-shaped) and on a folder of
CIFAR-10-shaped PNG files (``--dataset imagefolder``).

Both run the small CNN, so the data path's cost shows; 2 processes under torchrun, 2 epochs. Reported: images/s
over the whole run (2 epochs × the samples / the wall time), which counts what each path pays once — the device
path reads every file on every rank at the start, the stream path starts its workers — and, in the details, the
second epoch's images/s as the script reports it. ``--data-path auto`` takes, per dataset, the path with the
higher images/s here: the row says whether it does.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from tests.support.train_helpers import write_image_folder

from .common import ROOT, Result, median, run
from .throughput import _images_per_sec, _port

DEFAULTS = {"synthetic": "device", "imagefolder": "stream"}  # feed.STREAMED: what --data-path auto picks
WORKERS = 2


def _argv(nproc: int, *args: str) -> list[str]:
    script = str(ROOT / "src_train" / "train.py")
    if nproc == 1:
        return [sys.executable, script, *args]
    rdzv = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{_port()}"]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), *rdzv, script, *args]


def _measure_one(nproc: int, dataset_args: list[str], path: str, batch: int, cwd: Path) -> tuple[float, float]:
    """(images/s of the second epoch, the run's wall time in seconds)."""
    args = [*dataset_args, "--model", "cnn", "--epochs", "2", "--batch-size", str(batch), "--checkpoint-every", "0"]
    args += ["--eval-every", "1000", "--device", "cpu", "--data-path", path, "--workers", str(WORKERS)]
    began = time.perf_counter()
    out = run(_argv(nproc, *args, "--model-dir", str(cwd / "out")), cwd=cwd, timeout=1800).stdout
    return _images_per_sec(out), time.perf_counter() - began


def measure(tiny: bool) -> list[Result]:
    nproc, size, batch, reps = (1, 80, 16, 1) if tiny else (2, 4000, 64, 3)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "cifar-png"
        write_image_folder(folder, size // 10, max(1, size // 50))
        sets = {
            "synthetic": ["--dataset", "synthetic", "--synthetic-size", str(size)],
            "imagefolder": ["--dataset", "imagefolder", "--data-dir", str(folder)],
        }
        for name, dataset_args in sets.items():
            got: dict[str, list[tuple[float, float]]] = {"device": [], "stream": []}
            for _ in range(reps):  # interleaved, so a change in the machine's load touches both paths alike
                for path, runs in got.items():
                    runs.append(_measure_one(nproc, dataset_args, path, batch, Path(tmp)))
            rate = {path: 2 * size / median([w for _, w in runs]) for path, runs in got.items()}
            epoch = {path: round(median([r for r, _ in runs])) for path, runs in got.items()}
            faster = max(rate, key=lambda p: rate[p])
            results.append(
                Result(
                    case="data paths",
                    metric=f"{name}, whole run: stream ({WORKERS} workers per rank) vs device, {nproc} processes, cpu",
                    ours=rate["stream"],
                    theirs=rate["device"],
                    unit="images/s",
                    ratio=rate["stream"] / rate["device"],
                    better="higher",
                    baseline="device path",
                    target=f"auto picks the faster ({DEFAULTS[name]})",
                    passed=faster == DEFAULTS[name],
                    details={
                        "samples": size,
                        "batch_per_process": batch,
                        "reps": reps,
                        "second_epoch_images_per_s": json.dumps(epoch).replace(",", ";"),
                    },
                )
            )
    return results
