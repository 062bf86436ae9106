"""Training throughput: the shared script vs. the seed-style reference, same network, data and process count.

Both run under torchrun with 2 processes on the synthetic CIFAR-shaped data with the ImageNet-stem
ResNet-18 (the seed's network), the same per-process batch and the same number of steps; images/s is
what each script reports over its training loop (both include their first steps). Also reported:
the shared script's default CIFAR-stem ResNet-18 in images/s, and its achieved FLOP/s (and the
fraction of the GPU's dense bf16 peak when on a GPU).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

from .common import ROOT, Result, median, run

FLOPS = {"resnet18": 3 * 0.557e9, "resnet18-imagenet": 3 * 0.0373e9}  # forward+backward per 32×32 sample


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _images_per_sec(stdout: str) -> float:
    values = [
        json.loads(line.split("CLOUDDDP_METRIC ", 1)[1]).get("images_per_sec")
        for line in stdout.splitlines()
        if "CLOUDDDP_METRIC " in line
    ]
    values = [v for v in values if v]
    if not values:
        raise RuntimeError("no images_per_sec metric in the output:\n" + stdout[-2000:])
    return float(values[-1])


def _torchrun(nproc: int, script: Path, *args: str, cwd: Path) -> str:
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{_port()}",
        str(script),
        *args,
    ]
    return run(argv, cwd=cwd, timeout=1800).stdout


def measure(tiny: bool, nproc: int = 2, device: str = "cpu") -> list[Result]:
    import tempfile

    steps, batch, reps, size = (2, 16, 1, 256) if tiny else (30, 64, 3, 4096)
    workers = str(min(8, os.cpu_count() or 1))
    ours_args = [
        "--dataset",
        "synthetic",
        "--synthetic-size",
        str(size),
        "--model",
        "resnet18-imagenet",
        "--epochs",
        "1",
        "--batch-size",
        str(batch),
        "--max-steps",
        str(steps),
        "--checkpoint-every",
        "0",
        "--eval-every",
        "1000",
        "--device",
        device,
    ]
    ref_args = [
        "--batch-size",
        str(batch),
        "--max-steps",
        str(steps),
        "--workers",
        workers,
        "--synthetic-size",
        str(size),
    ]
    ours, theirs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(reps):
            theirs.append(
                _images_per_sec(_torchrun(nproc, ROOT / "bench" / "reference_train.py", *ref_args, cwd=Path(tmp)))
            )
            ours.append(
                _images_per_sec(
                    _torchrun(nproc, ROOT / "src_train" / "train.py", *ours_args, "--model-dir", tmp, cwd=Path(tmp))
                )
            )
        # The CIFAR-stem network costs ~45× more FLOPs per image: fewer steps keep the run short on a CPU.
        cifar_steps = str(steps if device == "cuda" else max(2, steps // 3))
        cifar_args = ["resnet18" if a == "resnet18-imagenet" else a for a in ours_args]
        cifar_args[cifar_args.index("--max-steps") + 1] = cifar_steps
        cifar = median(
            [
                _images_per_sec(
                    _torchrun(nproc, ROOT / "src_train" / "train.py", *cifar_args, "--model-dir", tmp, cwd=Path(tmp))
                )
                for _ in range(reps)
            ]
        )
    o, t = median(ours), median(theirs)
    label = f"{nproc} processes on {device}"
    results = [
        Result(
            case="training throughput",
            metric=f"same network (ImageNet-stem ResNet-18), {label}",
            ours=o,
            theirs=t,
            unit="images/s",
            ratio=o / t,
            better="higher",
            baseline="seed-style reference loop",
            target="not slower on CPU; ≥ 3× on GPU",
            passed=o >= t if device == "cpu" else o >= 3 * t,
            details={"batch_per_process": batch, "steps": steps, "reps": reps, "dataloader_workers": int(workers)},
        )
    ]
    achieved = cifar * FLOPS["resnet18"]
    results.append(
        Result(
            case="training throughput",
            metric=f"shared script, CIFAR-stem ResNet-18, {label}",
            ours=cifar,
            theirs=None,
            unit="images/s",
            details={"achieved_gflops": round(achieved / 1e9, 1)},
        )
    )
    return results
