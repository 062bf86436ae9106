"""The shared DDP training script that cloudddp packages with every job (torch + numpy only).

Launch it with torchrun, Azure ML's PyTorch or MPI distribution, SageMaker's torchrun or smddp
launcher, or plainly (``python train.py``: one process, ./outputs and ./checkpoints). It:

- sets up the process group from the standard variables (see distributed.py);
- reads the data by one of two paths (``--data-path``, feed.py): the whole dataset on the device, or streamed
  by a ``DataLoader`` with ``--workers`` per rank (folders of image files: images.py); augments whole batches
  on the device (data.py, augment.py);
- shards each epoch's permutation over the ranks (``DistributedSampler`` with ``set_epoch``: every epoch
  differs and every restart repeats it exactly; a mid-epoch resume skips exactly the batches done) and
  evaluates on all ranks, summing the counts (loop.py);
- writes checksummed checkpoints on rank 0 (atomic where the filesystem allows, checked on cloud
  mounts too) and resumes from the newest valid one (checkpoint.py, storage.py);
- on SIGTERM (cancel, spot reclamation) agrees with the other ranks, checkpoints where it is and
  exits 0, so a resubmitted or restarted job loses no step;
- prints one metric line per measurement on rank 0 (metrics.py), and logs it to MLflow too when
  ``MLFLOW_TRACKING_URI`` is set and mlflow is installed (mlflow_log.py);
- takes its folders and settings from the arguments, else the runtime contract's variables (config.py).

To train your own model on your own data, edit ddptrain/user.py; the steps below stay as they are.

Batch size and learning rate: ``--batch-size`` is per process, so the global batch is
``batch-size × world size`` (the seed scripts' rule); ``--global-batch-size`` instead fixes the global
batch and divides it over the ranks. ``--lr`` is used as given for that global batch — it is not
rescaled when the world size changes; keep the global batch fixed, or scale the lr linearly with it.
Schedule: linear warm-up over the first ``--warmup-epochs`` (from lr/10), then cosine decay to 0.
"""

from __future__ import annotations

import argparse
import gc
import io
import math
import random
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ddptrain import checkpoint, config, distributed, feed, loop, storage, user
from ddptrain.distributed import Context, UsageError
from ddptrain.loop import EpochEnd, Schedule, StopFlag, Training
from ddptrain.metrics import Reporter
from ddptrain.mlflow_log import MlflowLogger

# cloudddp's cost estimate reads this script's --model/--dataset/--epochs/--batch-size because of this line
# (cloudddp/catalog/sizing.py). Remove it if you make a step do other work than those arguments say.
SHARED_SCRIPT = "cloudddp-shared-train"
MLFLOW_WAIT_S = 30.0  # at the end, how long the last metrics may take to reach an MLflow server
MLFLOW_WAIT_AFTER_SIGTERM_S = 5.0  # shorter: the platform's SIGKILL is coming


def setup(args: argparse.Namespace) -> Context:
    """Process group, device, seeds."""
    ctx = distributed.setup(args.dist_backend, args.device, args.collective_timeout)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    if args.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
    elif ctx.device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    return ctx


def build(args: argparse.Namespace, ctx: Context, report: Reporter) -> Training:
    """Data and model (from user.py), optimizer and schedule; DDP and compilation come after resume()."""
    cuda = ctx.device.type == "cuda"
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16, "off": None, "auto": torch.bfloat16 if cuda else None}[
        args.amp
    ]
    data = user.build_data(args)
    per_rank = args.batch_size or (max(1, args.global_batch_size // ctx.world_size) if args.global_batch_size else 64)
    steps_per_epoch = len(data.train_y) // (per_rank * ctx.world_size)
    if steps_per_epoch < 1:
        raise UsageError(
            f"{len(data.train_y)} training samples are fewer than one global batch of {per_rank * ctx.world_size}"
        )
    schedule = Schedule(per_rank, steps_per_epoch, int(args.warmup_epochs * steps_per_epoch), args.lr, args.epochs)
    batches = feed.EpochBatches(len(data.train_y), per_rank, steps_per_epoch, args.seed, ctx)
    workers = feed.default_workers(ctx) if args.workers is None else args.workers
    source = feed.make(data, args.data_path, getattr(args, "dataset", ""), workers, batches, ctx)
    data = source.data
    model = user.build_model(args, data).to(ctx.device)
    if cuda:
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    optimizer = loop.make_optimizer(model, args)
    return Training(args, ctx, data, model, model, optimizer, schedule, amp, report, source)


def resume(t: Training) -> None:
    """Continue from the newest valid checkpoint (rank 0 reads it and sends it to the others)."""
    args, ctx = t.args, t.ctx
    if args.resume == "never" or args.checkpoint_every == 0:
        return
    found = checkpoint.load_latest(Path(args.checkpoint_dir)) if ctx.is_main else None
    got = distributed.broadcast_object(ctx, (str(found[0]), found[1]) if found else None)
    if not isinstance(got, tuple):  # None: no valid checkpoint, start from scratch
        return
    path, state = got
    try:
        t.model.load_state_dict(state["model"])
        t.optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError) as e:
        was = state.get("args", {}).get("model", "another model")
        raise UsageError(
            f"checkpoint {path} was written by {was!r} and does not fit this run's model {args.model!r} "
            f"({str(e).splitlines()[0][:120]}); use another checkpoint folder, or --resume never to start over"
        ) from None
    torch.set_rng_state(state["torch_rng"])
    t.epoch, t.step_in_epoch, t.global_step = state["epoch"], state["step_in_epoch"], state["global_step"]
    if ctx.is_main:
        print(
            f"resumed from {path} at epoch {t.epoch + 1}, step {t.step_in_epoch} (global step {t.global_step})",
            flush=True,
        )


def wrap(t: Training) -> None:
    """DDP (gradients averaged over the ranks) and, on GPUs, torch.compile."""
    cuda = t.ctx.device.type == "cuda"
    if t.ctx.distributed:
        t.net = nn.parallel.DistributedDataParallel(
            t.model, device_ids=[t.ctx.device.index] if cuda else None, gradient_as_bucket_view=True
        )
    if t.args.compile == "on" or (t.args.compile == "auto" and cuda):
        t.net = torch.compile(t.net)  # type: ignore[assignment]


def save_checkpoint(t: Training) -> bool:
    """Rank 0 writes the position and everything needed to continue from it bitwise; False if it could not."""
    if not t.ctx.is_main:
        return True
    s = t.schedule
    path = checkpoint.save(
        Path(t.args.checkpoint_dir),
        t.epoch,
        t.step_in_epoch,
        {
            "model": t.model.state_dict(),
            "optimizer": t.optimizer.state_dict(),
            "epoch": t.epoch,
            "step_in_epoch": t.step_in_epoch,
            "global_step": t.global_step,
            "torch_rng": torch.get_rng_state(),
            "schedule": {"kind": "warmup-cosine", "warmup": s.warmup, "total": s.total_steps, "lr": s.base_lr},
            "args": {k: v for k, v in vars(t.args).items() if k in ("dataset", "model", "epochs", "seed", "lr")},
        },
    )
    if path is not None:
        print(f"checkpoint {path.name}", flush=True)
    return path is not None


def export_model(t: Training) -> Path:
    """Rank 0 writes the trained model's state_dict to ``<model dir>/model.pt``."""
    out_dir = Path(t.args.model_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    torch.save(t.model.state_dict(), buf)
    storage.write_file(out_dir / "model.pt", buf.getvalue())
    return out_dir / "model.pt"


def train_epochs(t: Training) -> float | None:
    """Epochs from the current position to --epochs: the final test accuracy, or None when stopped by SIGTERM."""
    args, ctx = t.args, t.ctx
    if t.epoch >= args.epochs and ctx.is_main:
        print(
            f"the checkpoint in {args.checkpoint_dir} is already at epoch {t.epoch} of {args.epochs}: nothing "
            "left to train (to continue, raise --epochs: the arguments do not move the checkpoint folder; to "
            "start over, --resume never / checkpoint.resume: never)",
            flush=True,
        )
    stop = StopFlag()
    cadence = loop.Cadence(args.checkpoint_minutes if args.checkpoint_every > 0 else 0)
    test_acc = float("nan")
    while t.epoch < args.epochs:
        end = loop.train_one_epoch(t, stop, cadence, lambda: save_checkpoint(t))
        if end is EpochEnd.STOPPED:
            _stopped(t, save_checkpoint(t) if args.checkpoint_every > 0 else None)
            return None
        if t.epoch % args.eval_every == 0 or t.epoch == args.epochs:
            _, test_acc = loop.evaluate(t)
        written = None  # None: no checkpoint due at this epoch's end
        if args.checkpoint_every > 0 and (t.epoch % args.checkpoint_every == 0 or t.epoch == args.epochs):
            written = save_checkpoint(t)
            cadence.reset()
        if t.epoch < args.epochs and stop.agreed(ctx):
            if written is None and args.checkpoint_every > 0:
                written = save_checkpoint(t)
            _stopped(t, written)
            return None
        if end is EpochEnd.MAX_STEPS:
            break
    if math.isnan(test_acc):  # nothing trained in this run (already complete): still report the model
        _, test_acc = loop.evaluate(t)
    return test_acc


def _stopped(t: Training, written: bool | None) -> None:
    if t.ctx.is_main:
        where = f"epoch {t.epoch + 1}, step {t.step_in_epoch}" if t.step_in_epoch else f"the end of epoch {t.epoch}"
        outcome = {
            True: "checkpoint written",
            False: "the checkpoint could not be written (see the warning above)",
            None: "checkpoints are off (--checkpoint-every 0)",
        }[written]
        print(f"stopping on SIGTERM at {where}; {outcome}", flush=True)


def run(args: argparse.Namespace) -> int:
    """The steps, in order; every rank runs them all."""
    ctx = setup(args)
    report = Reporter(MlflowLogger.from_environment() if ctx.is_main else None)
    test_acc = None
    t = None
    try:
        t = build(args, ctx, report)
        resume(t)
        wrap(t)
        test_acc = train_epochs(t)
        if test_acc is not None and ctx.is_main:
            path = export_model(t)
            print(f"done: {t.epoch} epochs, test accuracy {test_acc:.4f}, model in {path}", flush=True)
    finally:
        report.close(MLFLOW_WAIT_S if test_acc is not None else MLFLOW_WAIT_AFTER_SIGTERM_S)
    # The DDP model keeps the process group (and gloo's pending work) alive through reference cycles; freed only
    # at interpreter exit, gloo's threads can abort the process (SIGABRT after "done", seen once on 2 hosts).
    del t
    gc.collect()
    distributed.teardown(ctx)  # every rank leaves together, after SIGTERM too: exit 0, nothing lost
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return run(config.parse_args(argv))
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
