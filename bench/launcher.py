"""Launcher overhead: `cloudddp submit --backend local` of a tiny DDP job vs. plain torchrun of the same script."""

from __future__ import annotations

import socket
import sys

from .common import FIXTURES, Result, cloudddp, median, run, timed

SCRIPT_DIR = FIXTURES / "tinyjob"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(tiny: bool) -> list[Result]:
    epochs, sleep, reps = (1, 0.0, 1) if tiny else (20, 0.5, 3)
    args = ["--epochs", str(epochs), "--sleep", str(sleep)]
    ours_cmd = cloudddp(
        "submit",
        str(SCRIPT_DIR / "job.yaml"),
        "-b",
        "local",
        "--quiet",
        "-o",
        f"code.args=[{', '.join(args)}]",
        "-o",
        "checkpoint.enabled=false",
    )

    def torchrun_cmd() -> list[str]:
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "1",
            "--nproc-per-node",
            "2",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            f"127.0.0.1:{_port()}",
            "train.py",
            *args,
        ]

    ours, theirs = [], []
    for _ in range(reps):  # alternate, so drift in machine load hits both alike
        theirs.append(timed(lambda: run(torchrun_cmd(), cwd=SCRIPT_DIR)))
        ours.append(timed(lambda: run(ours_cmd)))
    o, t = median(ours), median(theirs)
    overhead = (o - t) / t
    return [
        Result(
            case="launcher overhead",
            metric="wall time of a ~10 s 2-process job",
            ours=o,
            theirs=t,
            unit="s",
            ratio=o / t,
            better="lower",
            baseline="plain torchrun",
            target="≤ 15 % over torchrun",
            passed=overhead <= 0.15,
            details={"overhead_pct": round(100 * overhead, 1), "ours_s": ours, "torchrun_s": theirs, "reps": reps},
        )
    ]
