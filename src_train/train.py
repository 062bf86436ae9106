"""The shared DDP training script that cloudddp packages with every job (torch + numpy only).

Launch it with torchrun, Azure ML's PyTorch or MPI distribution, SageMaker's torchrun or smddp
launcher, or plainly (one process). It:

- sets up the process group from the standard variables (see distributed.py);
- keeps the whole dataset on the device as uint8 and augments whole batches there (augment.py);
- shards each epoch's permutation over the ranks (seeded by seed + epoch, so every epoch differs
  and every restart repeats it exactly) and evaluates on all ranks, summing the counts;
- writes atomic, checksummed checkpoints on rank 0 and resumes from the newest valid one;
- on SIGTERM (cancel, spot reclamation) agrees with the other ranks, checkpoints where it is and
  exits 0, so a resubmitted or restarted job loses no step;
- prints one metric line per measurement on rank 0 (metrics.py).

Batch size and learning rate: ``--batch-size`` is per process, so the global batch is
``batch-size × world size`` (the seed scripts' rule); ``--global-batch-size`` instead fixes the global
batch and divides it over the ranks. ``--lr`` is used as given for that global batch — it is not
rescaled when the world size changes; keep the global batch fixed, or scale the lr linearly with it.
Schedule: linear warm-up over the first ``--warmup-epochs`` (from lr/10), then cosine decay to 0.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import augment
import checkpoint
import data as datasets
import distributed
import metrics
import models
from distributed import Context, UsageError


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = os.environ
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--dataset", choices=["digits", "cifar10", "synthetic"], default="digits")
    p.add_argument("--data-dir", default=env.get("SM_CHANNEL_TRAIN") or env.get("CLOUDDDP_DATA_DIR"),
                   help="CIFAR-10 batches folder, its parent, or the .tar.gz")
    p.add_argument("--model", choices=["cnn", "resnet18", "resnet18-imagenet"], default="cnn")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=None, help="per process (default 64)")
    p.add_argument("--global-batch-size", type=int, default=None, help="split over the ranks instead")
    p.add_argument("--lr", type=float, default=0.1, help="for the global batch; not rescaled")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--warmup-epochs", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dist-backend", choices=["auto", "nccl", "gloo", "smddp"],
                   default=env.get("CLOUDDDP_DIST_BACKEND", "auto"))
    p.add_argument("--collective-timeout", type=float, default=float(env.get("CLOUDDDP_COLLECTIVE_TIMEOUT", "600")),
                   help="seconds a collective may wait for a rank before failing")
    p.add_argument("--checkpoint-dir", default=env.get("CLOUDDDP_CHECKPOINT_DIR") or (
        "/opt/ml/checkpoints" if Path("/opt/ml/checkpoints").is_dir() else "./checkpoints"))
    p.add_argument("--checkpoint-every", type=int, default=int(env.get("CLOUDDDP_CHECKPOINT_EVERY", "1")),
                   help="epochs between checkpoints; 0 = never")
    p.add_argument("--no-resume", action="store_true", default=env.get("CLOUDDDP_RESUME") == "never")
    p.add_argument("--model-dir", default=env.get("CLOUDDDP_OUTPUT_DIR") or env.get("SM_MODEL_DIR") or "./outputs")
    p.add_argument("--synthetic-size", type=int, default=5000)
    p.add_argument("--eval-every", type=int, default=1)
    p.add_argument("--log-every", type=int, default=0, help="steps between mid-epoch metric lines; 0 = epoch ends only")
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps in total (benchmarks)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--compile", choices=["auto", "on", "off"], default="auto", help="auto: on for CUDA only")
    p.add_argument("--amp", choices=["auto", "bf16", "fp16", "off"], default="auto", help="auto: bf16 on CUDA")
    p.add_argument("--deterministic", action="store_true", help="bitwise reproducible on CPU/gloo")
    args = p.parse_args(argv)
    if args.batch_size is not None and args.global_batch_size is not None:
        p.error("give --batch-size (per process) or --global-batch-size, not both")
    if args.epochs < 1:
        p.error("--epochs must be at least 1")
    return args


class StopFlag:
    """Set by SIGTERM/SIGINT; checked collectively so all ranks stop at the same step."""

    def __init__(self) -> None:
        self.raised = False
        signal.signal(signal.SIGTERM, self._set)

    def _set(self, *_: object) -> None:
        self.raised = True

    def agreed(self, ctx: Context) -> bool:
        flag = torch.tensor([1.0 if self.raised else 0.0], device=ctx.device)
        return bool(distributed.all_sum(ctx, flag).item() > 0)


def make_optimizer(model: nn.Module, args: argparse.Namespace) -> torch.optim.Optimizer:
    """SGD with Nesterov momentum, fused into one kernel per step where torch offers it (CUDA, and CPU
    since torch 2.4: ~3× faster than the per-tensor loop for ResNet-18 here)."""
    kwargs = {"lr": args.lr, "momentum": args.momentum, "nesterov": True, "weight_decay": args.weight_decay}
    try:
        return torch.optim.SGD(model.parameters(), fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.SGD(model.parameters(), **kwargs)


def lr_at(step: int, total: int, warmup: int, base: float) -> float:
    if step < warmup:
        return base * (0.1 + 0.9 * step / max(1, warmup))
    progress = (step - warmup) / max(1, total - warmup)
    return base * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def evaluate(ctx: Context, model: nn.Module, ds: datasets.Dataset, mean: torch.Tensor, std: torch.Tensor,
             amp: torch.dtype | None, batch: int) -> tuple[float, float]:
    """Loss and accuracy over the whole test set, sharded over all ranks and summed."""
    model.eval()
    idx = torch.arange(ctx.rank, len(ds.test_y), ctx.world_size, device=ctx.device)
    sums = torch.zeros(3, dtype=torch.float64, device=ctx.device)
    with torch.no_grad(), torch.autocast(ctx.device.type, dtype=amp or torch.float32, enabled=amp is not None):
        for start in range(0, len(idx), batch):
            part = idx[start:start + batch]
            x = augment.normalize(ds.test_x[part], mean, std, torch.float32)
            if ctx.device.type == "cuda":
                x = x.contiguous(memory_format=torch.channels_last)
            y = ds.test_y[part]
            out = model(x).float()
            sums[0] += F.cross_entropy(out, y, reduction="sum")
            sums[1] += (out.argmax(1) == y).sum()
            sums[2] += len(part)
    distributed.all_sum(ctx, sums)
    model.train()
    return (sums[0] / sums[2]).item(), (sums[1] / sums[2]).item()


def run(args: argparse.Namespace) -> int:
    ctx = distributed.setup(args.dist_backend, args.device, args.collective_timeout)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    cuda = ctx.device.type == "cuda"
    if args.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
    elif cuda:
        torch.backends.cudnn.benchmark = True
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16, "off": None, "auto": torch.bfloat16 if cuda else None}[args.amp]

    ds = datasets.load(args.dataset, args.data_dir, args.synthetic_size, args.seed).to(ctx.device)
    per_rank = args.batch_size or (max(1, args.global_batch_size // ctx.world_size) if args.global_batch_size else 64)
    steps_per_epoch = len(ds.train_y) // (per_rank * ctx.world_size)
    if steps_per_epoch < 1:
        raise UsageError(f"{len(ds.train_y)} training samples are fewer than one global batch of {per_rank * ctx.world_size}")
    total_steps = steps_per_epoch * args.epochs
    warmup = int(args.warmup_epochs * steps_per_epoch)
    in_ch = ds.train_x.shape[1]
    scaled = ds.train_x[:4096].float() / 255
    mean = scaled.mean(dim=(0, 2, 3)).view(1, -1, 1, 1)
    std = scaled.std(dim=(0, 2, 3)).clamp_min(1e-3).view(1, -1, 1, 1)

    model = models.build(args.model, in_ch, ds.num_classes).to(ctx.device)
    if cuda:
        model = model.to(memory_format=torch.channels_last)
    optimizer = make_optimizer(model, args)
    start_epoch, start_step, global_step = 0, 0, 0
    ckpt_dir = Path(args.checkpoint_dir)
    if not args.no_resume and args.checkpoint_every > 0:
        found = checkpoint.load_latest(ckpt_dir) if ctx.is_main else None
        state = distributed.broadcast_object(ctx, found[1] if found else None)
        if state is not None:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            torch.set_rng_state(state["torch_rng"])
            start_epoch, start_step, global_step = state["epoch"], state["step_in_epoch"], state["global_step"]
            if ctx.is_main:
                print(f"resumed from {found[0]} at epoch {start_epoch + 1}, step {start_step} "  # type: ignore[index]
                      f"(global step {global_step})", flush=True)
    net: nn.Module = model
    if ctx.distributed:
        net = nn.parallel.DistributedDataParallel(
            model, device_ids=[ctx.device.index] if cuda else None, gradient_as_bucket_view=True
        )
    if args.compile == "on" or (args.compile == "auto" and cuda):
        net = torch.compile(net)  # type: ignore[assignment]

    def save(epoch: int, step_in_epoch: int) -> None:
        if ctx.is_main:
            path = checkpoint.save(ckpt_dir, epoch, step_in_epoch, {
                "model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch,
                "step_in_epoch": step_in_epoch, "global_step": global_step, "torch_rng": torch.get_rng_state(),
                "schedule": {"kind": "warmup-cosine", "warmup": warmup, "total": total_steps, "lr": args.lr},
                "args": {k: v for k, v in vars(args).items() if k in ("dataset", "model", "epochs", "seed", "lr")},
            })
            print(f"checkpoint {path.name}", flush=True)

    if start_epoch >= args.epochs and ctx.is_main:
        print(f"the checkpoint is already at epoch {start_epoch} of {args.epochs}: nothing left to train "
              "(raise --epochs to continue, or --no-resume / checkpoint.resume: never to start over)", flush=True)
    stop = StopFlag()
    check_every = 1 if not cuda else 25  # on GPU, each check is a host sync
    test_acc = float("nan")
    final_epoch = start_epoch
    for epoch in range(start_epoch, args.epochs):
        perm = torch.randperm(len(ds.train_y), generator=torch.Generator().manual_seed(args.seed * 7919 + epoch))
        shard = perm[ctx.rank::ctx.world_size][: steps_per_epoch * per_rank].to(ctx.device)
        stats = torch.zeros(3, dtype=torch.float64, device=ctx.device)  # loss sum, correct, seen
        began = time.perf_counter()
        first = start_step if epoch == start_epoch else 0
        for step in range(first, steps_per_epoch):
            idx = shard[step * per_rank:(step + 1) * per_rank]
            g = augment.step_generator(ctx.device, args.seed, epoch, step, ctx.rank)
            x = augment.translate_flip(ds.train_x[idx], ds.pad, ds.flip, g)
            x = augment.normalize(x, mean, std, torch.float32)
            if cuda:
                x = x.contiguous(memory_format=torch.channels_last)
            y = ds.train_y[idx]
            lr = lr_at(global_step, total_steps, warmup, args.lr)
            for group in optimizer.param_groups:
                group["lr"] = lr
            with torch.autocast(ctx.device.type, dtype=amp or torch.float32, enabled=amp is not None):
                out = net(x)
                loss = F.cross_entropy(out.float(), y, label_smoothing=args.label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            global_step += 1
            stats += torch.stack([loss.detach().double() * len(y), (out.argmax(1) == y).sum().double(),
                                  torch.tensor(float(len(y)), dtype=torch.float64, device=ctx.device)])
            if args.log_every and global_step % args.log_every == 0:
                agg = distributed.all_sum(ctx, stats.clone())
                if ctx.is_main:
                    metrics.emit(global_step, epoch + 1, train_loss=(agg[0] / agg[2]).item(),
                                 train_acc=(agg[1] / agg[2]).item(), lr=lr)
            # At an epoch's last step the stop waits for the epoch's end (metrics, eval, checkpoint) below.
            if (step + 1) % check_every == 0 and step + 1 < steps_per_epoch and stop.agreed(ctx):
                save(epoch, step + 1)
                return _stopped(ctx, epoch, step + 1)
            if args.max_steps and global_step >= args.max_steps:
                break
        if cuda:
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - began
        agg = distributed.all_sum(ctx, stats)
        final_epoch = epoch + 1
        if ctx.is_main and agg[2] > 0:
            metrics.emit(global_step, epoch + 1, train_loss=(agg[0] / agg[2]).item(), train_acc=(agg[1] / agg[2]).item(),
                         lr=lr_at(global_step, total_steps, warmup, args.lr),
                         images_per_sec=agg[2].item() / max(elapsed, 1e-9), epoch_time=elapsed)
        if (epoch + 1) % args.eval_every == 0 or epoch + 1 == args.epochs:
            if ctx.distributed:  # BatchNorm running stats drift per rank: evaluate rank 0's on every rank
                for buf in model.buffers():
                    torch.distributed.broadcast(buf, src=0)
            test_loss, test_acc = evaluate(ctx, model, ds, mean, std, amp, max(per_rank, 256))
            if ctx.is_main:
                metrics.emit(global_step, epoch + 1, test_loss=test_loss, test_acc=test_acc)
        saved = args.checkpoint_every > 0 and ((epoch + 1) % args.checkpoint_every == 0 or epoch + 1 == args.epochs)
        if saved:
            save(epoch + 1, 0)
        if epoch + 1 < args.epochs and stop.agreed(ctx):
            if not saved and args.checkpoint_every > 0:
                save(epoch + 1, 0)
            return _stopped(ctx, epoch + 1, 0)
        if args.max_steps and global_step >= args.max_steps:
            break
    if math.isnan(test_acc):  # nothing trained in this run (already complete): still report the model
        test_loss, test_acc = evaluate(ctx, model, ds, mean, std, amp, max(per_rank, 256))
        if ctx.is_main:
            metrics.emit(global_step, final_epoch, test_loss=test_loss, test_acc=test_acc)
    if ctx.is_main:
        out_dir = Path(args.model_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        tmp = out_dir / ".model.pt.tmp"
        torch.save(model.state_dict(), tmp)
        os.replace(tmp, out_dir / "model.pt")
        print(f"done: {final_epoch} epochs, test accuracy {test_acc:.4f}, model in {out_dir / 'model.pt'}", flush=True)
    distributed.teardown(ctx)
    return 0


def _stopped(ctx: Context, epoch: int, step: int) -> int:
    """Leave after SIGTERM: the checkpoint is written, every rank exits 0 together."""
    if ctx.is_main:
        where = f"epoch {epoch + 1}, step {step}" if step else f"the end of epoch {epoch}"
        print(f"stopping on SIGTERM at {where}; checkpoint written", flush=True)
    distributed.teardown(ctx)
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return run(parse_args(argv))
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
