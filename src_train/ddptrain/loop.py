"""The steps train.py repeats: one epoch of training, and one evaluation sharded over the ranks.

:class:`Training` carries everything they share. Its position (``epoch``, ``step_in_epoch``,
``global_step``) is what a checkpoint records: each epoch's order is a permutation seeded by seed and
epoch (the order and resume rules are in feed.py, the same for both data paths), and each step's augmentation
draws come from a generator seeded by (seed, epoch, step, rank), so a run resumed at any position repeats exactly
what an uninterrupted run would have done.
"""

from __future__ import annotations

import argparse
import enum
import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from . import augment, distributed
from .data import Dataset
from .distributed import Context
from .feed import Feed
from .metrics import Reporter


@dataclass(frozen=True)
class Schedule:
    """Batch sizes and the learning rate: linear warm-up from lr/10, then cosine decay to 0."""

    per_rank: int  # samples per process per step
    steps_per_epoch: int
    warmup: int  # steps
    base_lr: float
    epochs: int

    @property
    def total_steps(self) -> int:
        return self.steps_per_epoch * self.epochs

    def lr(self, step: int) -> float:
        if step < self.warmup:
            return self.base_lr * (0.1 + 0.9 * step / max(1, self.warmup))
        progress = (step - self.warmup) / max(1, self.total_steps - self.warmup)
        return self.base_lr * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


@dataclass
class Training:
    args: argparse.Namespace
    ctx: Context
    data: Dataset
    model: nn.Module  # the bare model: state dicts, evaluation, the exported model
    net: nn.Module  # what a training step calls: the model wrapped in DDP (and compiled)
    optimizer: torch.optim.Optimizer
    schedule: Schedule
    amp: torch.dtype | None
    report: Reporter  # rank 0's metrics (call it on rank 0 only)
    feed: Feed  # the data path: each step's batch on the device
    epoch: int = 0  # epochs finished
    step_in_epoch: int = 0  # steps finished in the current epoch
    global_step: int = 0  # optimizer steps in total


class EpochEnd(enum.Enum):
    FINISHED = "finished"
    STOPPED = "stopped"  # every rank agreed to stop (SIGTERM) before the epoch's end
    MAX_STEPS = "max steps"  # --max-steps reached (benchmarks): the epoch ends early, the run ends


class StopFlag:
    """Set by SIGTERM; checked collectively so all ranks stop at the same step."""

    def __init__(self) -> None:
        self.raised = False
        signal.signal(signal.SIGTERM, self._set)

    def _set(self, *_: object) -> None:
        self.raised = True

    def agreed(self, ctx: Context) -> bool:
        flag = torch.tensor([1.0 if self.raised else 0.0], device=ctx.device)
        return bool(distributed.all_sum(ctx, flag).item() > 0)

    def poll(self, ctx: Context, checkpoint_due: bool) -> tuple[bool, bool]:
        """(stop, checkpoint now), agreed by every rank in one collective: a stop when any rank got SIGTERM, a
        checkpoint when rank 0's clock says one is due (its clock alone, so the ranks cannot disagree)."""
        due = checkpoint_due and ctx.is_main
        flags = torch.tensor([1.0 if self.raised else 0.0, 1.0 if due else 0.0], device=ctx.device)
        total = distributed.all_sum(ctx, flags)
        return bool(total[0].item() > 0), bool(total[1].item() > 0)


class Cadence:
    """A checkpoint every ``minutes`` of training (``--checkpoint-minutes``; 0: none), on top of the epoch ends:
    for capacity that can be taken back without a signal (Azure ML's low priority), the work lost is bounded."""

    def __init__(self, minutes: float) -> None:
        self.seconds = minutes * 60
        self.last = time.monotonic()

    def due(self) -> bool:
        return self.seconds > 0 and time.monotonic() - self.last >= self.seconds

    def reset(self) -> None:
        self.last = time.monotonic()


def make_optimizer(model: nn.Module, args: argparse.Namespace) -> torch.optim.Optimizer:
    """SGD with Nesterov momentum, fused into one kernel per step where torch offers it (CUDA, and CPU
    since torch 2.4: ~3× faster than the per-tensor loop for ResNet-18 here)."""
    kwargs = {"lr": args.lr, "momentum": args.momentum, "nesterov": True, "weight_decay": args.weight_decay}
    try:
        return torch.optim.SGD(model.parameters(), fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.SGD(model.parameters(), **kwargs)


def _as_input(t: Training, x: torch.Tensor) -> torch.Tensor:
    return x.contiguous(memory_format=torch.channels_last) if t.ctx.device.type == "cuda" and x.dim() == 4 else x


def train_one_epoch(
    t: Training, stop: StopFlag, cadence: Cadence | None = None, save: Callable[[], object] | None = None
) -> EpochEnd:
    """Train from ``t.step_in_epoch`` to the end of epoch ``t.epoch`` (or a stop), advancing ``t``'s position;
    ``save`` writes a checkpoint where the run is whenever ``cadence`` says one is due (the epoch goes on)."""
    ctx, args, s, ds = t.ctx, t.args, t.schedule, t.data
    check_every = 1 if ctx.device.type != "cuda" else 25  # on GPU, each check is a host sync
    stats = torch.zeros(3, dtype=torch.float64, device=ctx.device)  # loss sum, correct, seen
    began = time.perf_counter()
    end = EpochEnd.FINISHED
    for step, (raw, y) in enumerate(t.feed.epoch(t.epoch, t.step_in_epoch), t.step_in_epoch):
        g = augment.step_generator(ctx.device, args.seed, t.epoch, step, ctx.rank)
        x = _as_input(t, ds.train_inputs(raw, g))
        lr = s.lr(t.global_step)
        for group in t.optimizer.param_groups:
            group["lr"] = lr
        with torch.autocast(ctx.device.type, dtype=t.amp or torch.float32, enabled=t.amp is not None):
            out = t.net(x)
            loss = F.cross_entropy(out.float(), y, label_smoothing=args.label_smoothing)
        t.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        t.optimizer.step()
        t.global_step += 1
        t.step_in_epoch = step + 1
        stats += torch.stack(
            [
                loss.detach().double() * len(y),
                (out.argmax(1) == y).sum().double(),
                torch.tensor(float(len(y)), dtype=torch.float64, device=ctx.device),
            ]
        )
        if args.log_every and t.global_step % args.log_every == 0:
            agg = distributed.all_sum(ctx, stats.clone())
            if ctx.is_main:
                t.report(
                    t.global_step,
                    t.epoch + 1,
                    train_loss=(agg[0] / agg[2]).item(),
                    train_acc=(agg[1] / agg[2]).item(),
                    lr=lr,
                )
        # At an epoch's last step a stop waits for the epoch's end (metrics, evaluation, checkpoint).
        if (step + 1) % check_every == 0 and step + 1 < s.steps_per_epoch:
            stopping, checkpoint_now = stop.poll(ctx, cadence is not None and cadence.due())
            if stopping:
                return EpochEnd.STOPPED
            if checkpoint_now and save is not None and cadence is not None:
                save()
                cadence.reset()
        if args.max_steps and t.global_step >= args.max_steps:
            end = EpochEnd.MAX_STEPS
            break
    if ctx.device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - began
    agg = distributed.all_sum(ctx, stats)
    if ctx.is_main and agg[2] > 0:
        t.report(
            t.global_step,
            t.epoch + 1,
            train_loss=(agg[0] / agg[2]).item(),
            train_acc=(agg[1] / agg[2]).item(),
            lr=s.lr(t.global_step),
            images_per_sec=agg[2].item() / max(elapsed, 1e-9),
            epoch_time=elapsed,
        )
    t.epoch += 1
    t.step_in_epoch = 0
    return end


def evaluate(t: Training) -> tuple[float, float]:
    """Loss and accuracy over the whole test set, sharded over all ranks and summed; rank 0 reports them."""
    ctx, ds, model = t.ctx, t.data, t.model
    if ctx.distributed:  # BatchNorm running stats drift per rank: evaluate rank 0's on every rank
        for buf in model.buffers():
            torch.distributed.broadcast(buf, src=0)
    batch = max(t.schedule.per_rank, 256)
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64, device=ctx.device)
    with torch.no_grad(), torch.autocast(ctx.device.type, dtype=t.amp or torch.float32, enabled=t.amp is not None):
        for raw, y in t.feed.test(batch):
            x = _as_input(t, ds.test_inputs(raw))
            out = model(x).float()
            sums[0] += F.cross_entropy(out, y, reduction="sum")
            sums[1] += (out.argmax(1) == y).sum()
            sums[2] += len(y)
    distributed.all_sum(ctx, sums)
    model.train()
    loss, acc = (sums[0] / sums[2]).item(), (sums[1] / sums[2]).item()
    if ctx.is_main:
        t.report(t.global_step, t.epoch, test_loss=loss, test_acc=acc)
    return loss, acc
