"""Running the shared training script for real in tests: plainly or under torchrun."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from .cli import ROOT

TRAIN = ROOT / "src_train" / "train.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_argv(nproc: int, *args: str, max_restarts: int = 0) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(nproc),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--max-restarts",
            str(max_restarts), str(TRAIN), *args]


def train(nproc: int, *args: str, cwd: Path, timeout: float = 240, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = torchrun_argv(nproc, *args) if nproc > 1 else [sys.executable, str(TRAIN), *args]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": "", **(env or {})})
