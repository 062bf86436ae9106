"""Command-line arguments, with defaults from the runtime contract cloudddp sets on every backend.

An argument given on the command line always wins; then the environment variable; then the default for
a person who runs ``python train.py`` by hand:

    --model-dir            CLOUDDDP_MODEL_DIR            ./outputs
    --checkpoint-dir       CLOUDDDP_CHECKPOINT_DIR       ./checkpoints
    --resume               CLOUDDDP_RESUME               auto
    --checkpoint-every     CLOUDDDP_CHECKPOINT_EVERY     1
    --checkpoint-minutes   CLOUDDDP_CHECKPOINT_MINUTES   0
    --dist-backend         CLOUDDDP_DIST_BACKEND         auto (nccl on GPUs, gloo on CPU)
    --collective-timeout   CLOUDDDP_COLLECTIVE_TIMEOUT   600
    --data-dir             CLOUDDDP_INPUT_<NAME>, when the job has exactly one input; else none

cloudddp passes ``--data-dir <path>`` itself for an input declared with ``arg: --data-dir``. Options
for your own model and data are added in user.py.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import user

INPUT_PREFIX = "CLOUDDDP_INPUT_"


@dataclass(frozen=True)
class FromEnv:
    """An option whose default comes from a runtime-contract variable."""

    flag: str
    variable: str
    fallback: str
    convert: Callable[[str], Any] = str
    choices: tuple[str, ...] | None = None

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


CONTRACT = (
    FromEnv("--model-dir", "CLOUDDDP_MODEL_DIR", "./outputs"),
    FromEnv("--checkpoint-dir", "CLOUDDDP_CHECKPOINT_DIR", "./checkpoints"),
    FromEnv("--resume", "CLOUDDDP_RESUME", "auto", choices=("auto", "never")),
    FromEnv("--checkpoint-every", "CLOUDDDP_CHECKPOINT_EVERY", "1", int),
    FromEnv("--checkpoint-minutes", "CLOUDDDP_CHECKPOINT_MINUTES", "0", float),
    FromEnv("--dist-backend", "CLOUDDDP_DIST_BACKEND", "auto", choices=("auto", "nccl", "gloo", "smddp")),
    FromEnv("--collective-timeout", "CLOUDDDP_COLLECTIVE_TIMEOUT", "600", float),
)
HELP = {
    "--model-dir": "where rank 0 writes the final model.pt",
    "--checkpoint-dir": "where rank 0 writes checkpoints (and a restart finds them)",
    "--resume": "auto: continue from the newest valid checkpoint; never: start over",
    "--checkpoint-every": "epochs between checkpoints; 0 = never",
    "--checkpoint-minutes": "also a checkpoint mid-epoch after this many minutes since the last one; 0 = never",
    "--dist-backend": "process-group backend; auto: nccl on GPUs, gloo on CPU",
    "--collective-timeout": "seconds a collective may wait for a rank before failing",
}


def parse_args(argv: list[str] | None = None, env: Mapping[str, str] = os.environ) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="The shared DDP training script that cloudddp packages with every job.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--data-dir",
        default=argparse.SUPPRESS,
        help=f"the data folder (default: {INPUT_PREFIX}<NAME> when the job has exactly one input)",
    )
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=None, help="per process (default 64)")
    p.add_argument("--global-batch-size", type=int, default=None, help="split over the ranks instead")
    p.add_argument("--lr", type=float, default=0.1, help="for the global batch; not rescaled")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--warmup-epochs", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=1, help="epochs between evaluations (the last epoch always)")
    p.add_argument("--log-every", type=int, default=0, help="steps between mid-epoch metric lines; 0 = epoch ends only")
    p.add_argument(
        "--data-path",
        choices=["auto", "device", "stream"],
        default="auto",
        help="device: the whole dataset on the device; stream: a DataLoader with --workers reads each batch; "
        "auto: the faster per dataset (stream for imagefolder, else device; feed.py)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="DataLoader processes per rank, stream path (default: 2, fewer where a rank has under 3 CPUs)",
    )
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--compile", choices=["auto", "on", "off"], default="auto", help="auto: on for CUDA only")
    p.add_argument("--amp", choices=["auto", "bf16", "fp16", "off"], default="auto", help="auto: bf16 on CUDA")
    p.add_argument("--deterministic", action="store_true", help="bitwise reproducible on CPU/gloo")
    p.add_argument(
        "--max-steps",
        type=int,
        default=0,
        help="for benchmarks: stop after this many optimizer steps in total; 0 = no limit",
    )
    contract = p.add_argument_group("runtime contract (cloudddp sets these variables in every job)")
    for option in CONTRACT:
        contract.add_argument(
            option.flag,
            type=option.convert,
            choices=option.choices,
            default=argparse.SUPPRESS,
            help=f"{HELP[option.flag]} (default: ${option.variable}, else {option.fallback})",
        )
    user.add_arguments(p.add_argument_group("your model and data (user.py)"))
    args = p.parse_args(argv)

    for option in CONTRACT:
        if not hasattr(args, option.dest):
            setattr(args, option.dest, _from_env(p, option, env))
    if not hasattr(args, "data_dir"):
        inputs = sorted(name for name, value in env.items() if name.startswith(INPUT_PREFIX) and value)
        args.data_dir = env[inputs[0]] if len(inputs) == 1 else None
    if args.batch_size is not None and args.global_batch_size is not None:
        p.error("give --batch-size (per process) or --global-batch-size, not both")
    if args.epochs < 1:
        p.error("--epochs must be at least 1")
    if args.workers is not None and args.workers < 0:
        p.error("--workers must be 0 (read in the training process) or more")
    if args.checkpoint_every < 0:
        p.error("--checkpoint-every must be 0 (never) or more")
    if args.checkpoint_minutes < 0:
        p.error("--checkpoint-minutes must be 0 (never) or more")
    if not args.collective_timeout > 0:
        p.error("--collective-timeout must be more than 0 seconds")
    return args


def _from_env(p: argparse.ArgumentParser, option: FromEnv, env: Mapping[str, str]) -> Any:
    raw = env.get(option.variable, "").strip() or option.fallback
    if option.choices is not None and raw not in option.choices:
        p.error(f"{option.variable}={raw!r} is not one of {', '.join(option.choices)} (or pass {option.flag})")
    try:
        return option.convert(raw)
    except ValueError:
        p.error(f"{option.variable}={raw!r} is not a number (or pass {option.flag})")
