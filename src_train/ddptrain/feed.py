"""The two data paths (``--data-path``): how each step's batch reaches the device.

- **device**: the whole dataset sits on the device (image files are read once, at the start); each step gathers
  its batch there by index. No workers, no copies: the fastest where the data fits in device memory.
- **stream**: the dataset stays where it is (in host memory, or as files: images.py); a ``DataLoader`` with
  ``--workers`` processes per rank reads each batch (a whole batch per fetch), pinned on GPUs and copied to the
  device without blocking. For data that does not fit in memory, and files that are cheaper to read than to hold.

Both take the same samples in the same order, so the two paths train bitwise alike. **The order rule**: epoch
``e``'s order is ``DistributedSampler(shuffle=True, seed=--seed, drop_last=True)`` after ``set_epoch(e)``: a
permutation of all N samples drawn from a generator seeded with ``seed + e``, cut to a multiple of the world size
W, of which rank r takes positions r, r+W, r+2W, …; its first ``steps × B`` samples (B the per-rank batch) form
the epoch's steps, B at a time. **The resume rule**: a run resumed at step k of epoch e rebuilds epoch e's order
and skips this rank's first ``k × B`` samples before any is read; nothing else is saved. Augmentation draws come
from a generator seeded per (seed, epoch, step, rank) on the device (augment.py), never in the workers, so a
worker holds no random state a checkpoint would have to keep.

``auto`` picks per dataset by measurement (``make bench``, case data-paths; docs/benchmarks.md): the device path
for the in-memory sets, the stream path for image folders.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, DistributedSampler

from .data import Dataset
from .distributed import Context, cpu_threads
from .images import Images

Batch = tuple[torch.Tensor, torch.Tensor]  # raw samples (as the dataset holds them) and int64 labels
STREAMED = ("imagefolder",)  # the datasets whose auto data path is the stream (the others: the device)
MOST_WORKERS = 2  # the default's ceiling, per rank (the acceptance: CIFAR-10 files with 2 workers per rank)


class EpochBatches:
    """This rank's batches of one epoch from one step on, by the order and resume rules above (the
    ``DataLoader``'s batch sampler: it runs in the training process, so :meth:`position` takes effect at the next
    ``iter`` even with persistent workers)."""

    def __init__(self, n: int, per_rank: int, steps: int, seed: int, ctx: Context) -> None:
        # The sampler needs only the dataset's length: a range stands for it.
        self.sampler: DistributedSampler[int] = DistributedSampler(
            range(n),  # type: ignore[arg-type]
            num_replicas=ctx.world_size,
            rank=ctx.rank,
            shuffle=True,
            seed=seed,
            drop_last=True,
        )
        self.per_rank, self.steps, self.start = per_rank, steps, 0

    def position(self, epoch: int, step: int) -> None:
        self.sampler.set_epoch(epoch)
        self.start = step

    def __iter__(self) -> Iterator[list[int]]:
        order = list(self.sampler)
        b = self.per_rank
        for step in range(self.start, self.steps):
            yield order[step * b : (step + 1) * b]

    def __len__(self) -> int:
        return self.steps - self.start


class DeviceFeed:
    """The device path: the dataset on the device, batches gathered there."""

    def __init__(self, data: Dataset, batches: EpochBatches, ctx: Context) -> None:
        self.data, self.batches, self.ctx = data.to(ctx.device), batches, ctx

    def epoch(self, epoch: int, step: int) -> Iterator[Batch]:
        self.batches.position(epoch, step)
        for picked in self.batches:
            idx = torch.tensor(picked, device=self.ctx.device)
            yield self.data.train_x[idx], self.data.train_y[idx]

    def test(self, batch: int) -> Iterator[Batch]:
        for idx in _test_shard(len(self.data.test_y), batch, self.ctx):
            part = torch.tensor(idx, device=self.ctx.device)
            yield self.data.test_x[part], self.data.test_y[part]


class _Samples(torch.utils.data.Dataset[Batch]):
    """Samples and labels fetched a whole batch at a time (``__getitems__``: one gather, not B)."""

    def __init__(self, x: torch.Tensor | Images, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitems__(self, idx: list[int]) -> Batch:
        picked = torch.tensor(idx)
        return self.x[picked], self.y[picked]

    def __getitem__(self, i: int) -> Batch:
        return self.__getitems__([i])


def _as_is(batch: Any) -> Any:
    """The batch as ``__getitems__`` made it (already stacked)."""
    return batch


def _ignore_sigterm(_: int) -> None:
    """A worker ignores SIGTERM: a launcher that signals the rank's whole process group (torchrun's agent does)
    must not kill the workers under a rank that is about to checkpoint; the rank stops them itself, and a worker
    whose rank dies is ended by the ``DataLoader``'s watchdog."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


class StreamFeed:
    """The stream path: a ``DataLoader`` with ``workers`` processes per rank reads each batch."""

    def __init__(self, data: Dataset, batches: EpochBatches, ctx: Context, workers: int) -> None:
        self.data, self.batches, self.ctx, self.workers = data, batches, ctx, workers
        self.train = self._loader(_Samples(data.train_x, data.train_y), batches)
        self.tests: DataLoader[Batch] | None = None

    def _loader(self, samples: _Samples, batches: object) -> DataLoader[Batch]:
        return DataLoader(
            samples,
            batch_sampler=batches,  # type: ignore[arg-type]
            num_workers=self.workers,
            collate_fn=_as_is,
            pin_memory=self.ctx.device.type == "cuda",
            persistent_workers=self.workers > 0,
            worker_init_fn=_ignore_sigterm if self.workers > 0 else None,
        )

    def _on_device(self, loader: DataLoader[Batch]) -> Iterator[Batch]:
        for x, y in loader:
            yield x.to(self.ctx.device, non_blocking=True), y.to(self.ctx.device, non_blocking=True)

    def epoch(self, epoch: int, step: int) -> Iterator[Batch]:
        self.batches.position(epoch, step)
        return self._on_device(self.train)

    def test(self, batch: int) -> Iterator[Batch]:
        if self.tests is None:
            shard = list(_test_shard(len(self.data.test_y), batch, self.ctx))
            self.tests = self._loader(_Samples(self.data.test_x, self.data.test_y), shard)
        return self._on_device(self.tests)


def _test_shard(n: int, batch: int, ctx: Context) -> Iterator[list[int]]:
    """This rank's share of the test set (every W-th sample from its rank), ``batch`` at a time."""
    idx = list(range(ctx.rank, n, ctx.world_size))
    for start in range(0, len(idx), batch):
        yield idx[start : start + batch]


Feed = DeviceFeed | StreamFeed


def default_workers(ctx: Context) -> int:
    """``--workers``' default: 2 per rank, but never more than the rank's CPUs less the one it trains on. Measured
    (``bench.data_paths``, a CIFAR-10-shaped PNG folder, 2 ranks on 2 cores): 0 or 1 workers per rank 207-275
    images/s, 2 workers 176-259, 4 workers 179-204: a worker without a CPU of its own only competes with training."""
    return min(MOST_WORKERS, cpu_threads(ctx.local_world_size) - 1)


def make(data: Dataset, path: str, dataset: str, workers: int, batches: EpochBatches, ctx: Context) -> Feed:
    """The feed ``--data-path`` names; ``auto``: the stream for :data:`STREAMED` datasets, else the device."""
    if path == "stream" or (path == "auto" and dataset in STREAMED):
        return StreamFeed(data, batches, ctx, workers)
    return DeviceFeed(data, batches, ctx)
