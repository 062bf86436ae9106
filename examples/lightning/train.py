"""A Lightning project as Lightning's own examples write one: a LightningModule, a DataModule, a Trainer.

It runs unchanged on every cloudddp backend (job.yaml). What cloudddp needs from it, and nothing more:

- ``--num-nodes`` and ``--devices`` from the job's shape (``{{nodes}}``, ``{{processes_per_node}}`` in job.yaml):
  Lightning checks that devices × num_nodes is the world size torchrun (or srun) started.
- ``--root`` is the training's checkpoint folder (``{{checkpoint_dir}}``): Lightning's checkpoints and its
  CSVLogger's ``metrics.csv`` go there, so a resubmit resumes (``ckpt_path="last"``) and cloudddp reads the
  metrics from the file as they are written (every 10 steps here; Lightning's default is 100).
- ``CheckpointOnStop``: a stop (cancel, preemption, spot reclaim) writes ``last.ckpt`` at a step every rank
  agrees on and ends the fit; without it the run resumes from its last periodic checkpoint instead. (Lightning's
  own SIGTERM handling saves nothing and broadcasts inside its signal handler, which can hang when every rank is
  signalled at once: the callback takes its place.)
- ``spare_worker``: the DataLoader workers ignore SIGTERM (their parent ends them). Slurm signals every process
  of a step itself, and a worker killed by a SIGTERM that did not come from its parent crashes the rank before it
  can save (docs/stopping.md, "DataLoader workers on Slurm"). Harmless on every other backend.

The data is made here (no download): a fixed random regression task, so any machine can run it.
"""

from __future__ import annotations

import argparse
import os
import signal

import lightning as L
import torch
from lightning.fabric.utilities.seed import pl_worker_init_function
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self, features: int = 32, hidden: int = 64, lr: float = 0.05, step_sleep: float = 0.0) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x).squeeze(-1), y)
        self.log("train_loss", loss, sync_dist=True)
        if self.hparams.step_sleep:
            import time

            time.sleep(self.hparams.step_sleep)  # a stand-in for a real model's step time
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.net(x).squeeze(-1), y), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


def spare_worker(worker_id: int) -> None:
    """A DataLoader worker ignores SIGTERM (on Slurm every process of the step gets one; the worker's parent ends
    it), then seeds itself as Lightning would have (``seed_everything(workers=True)`` adds its own only to a loader
    without a ``worker_init_fn``)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pl_worker_init_function(worker_id)


class RandomRegression(L.LightningDataModule):
    def __init__(self, samples: int = 2048, features: int = 32, batch_size: int = 32, workers: int = 2) -> None:
        super().__init__()
        self.samples, self.features, self.batch_size, self.workers = samples, features, batch_size, workers

    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(self.samples, self.features, generator=g)
        y = x @ torch.randn(self.features, generator=g) + 0.1 * torch.randn(self.samples, generator=g)
        split = self.samples * 7 // 8
        self.train, self.val = TensorDataset(x[:split], y[:split]), TensorDataset(x[split:], y[split:])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.train,
            batch_size=self.batch_size,
            shuffle=True,
            num_workers=self.workers,
            persistent_workers=self.workers > 0,
            worker_init_fn=spare_worker,
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=self.batch_size, num_workers=0)


class CheckpointOnStop(Callback):
    """A stop (SIGTERM) ends the fit at a step every rank agrees on, with ``last.ckpt`` written there.

    It replaces Lightning's own SIGTERM handler, which broadcasts from inside the signal handler: when every rank
    is signalled (cloudddp's launchers do, and Slurm does) a rank whose handler runs while another rank is inside a
    collective can leave both waiting until the SIGKILL. Here the handler only notes the signal; the ranks agree on
    it with one all-reduce before each step, end the fit as Lightning ends it on SIGTERM (``SIGTERMException``,
    between two steps, so the interrupted epoch resumes where it stopped) and save. The checkpoint names itself as
    the callback's ``last_model_path``, so the resumed run writes its next ``last.ckpt`` over it (not
    ``last-v1.ckpt`` beside it)."""

    def __init__(self, checkpoint: ModelCheckpoint) -> None:
        self.checkpoint, self.heard = checkpoint, False

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        signal.signal(signal.SIGTERM, self._heard)  # after Lightning installed its own for this fit

    def _heard(self, signum: int, frame: object) -> None:
        self.heard = True

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: object) -> None:
        flag = trainer.strategy.reduce(torch.tensor([float(self.heard)], device=pl_module.device), reduce_op="max")
        if flag.item():
            raise SIGTERMException

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException) and self.checkpoint.dirpath:
            path = os.path.join(self.checkpoint.dirpath, "last.ckpt")
            self.checkpoint.last_model_path = path
            trainer.save_checkpoint(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--root", default="lightning-out", help="where checkpoints and logs go")
    parser.add_argument("--max-epochs", type=int, default=4)
    parser.add_argument("--every-n-steps", type=int, default=20, help="a periodic checkpoint every N steps")
    parser.add_argument("--step-sleep", type=float, default=0.0)
    args = parser.parse_args()

    L.seed_everything(0, workers=True)
    checkpoint = ModelCheckpoint(
        dirpath=os.path.join(args.root, "checkpoints"),
        save_last=True,
        save_top_k=2,
        monitor="train_loss",
        every_n_train_steps=args.every_n_steps,
    )
    trainer = L.Trainer(
        accelerator="auto",
        devices=args.devices,
        num_nodes=args.num_nodes,
        strategy="ddp",
        max_epochs=args.max_epochs,
        default_root_dir=args.root,
        logger=CSVLogger(args.root, flush_logs_every_n_steps=10),  # written every 10 steps, not 100: read live
        callbacks=[checkpoint, CheckpointOnStop(checkpoint)],
        log_every_n_steps=5,
        enable_progress_bar=False,  # a log file is not a terminal; cloudddp reads metrics from metrics.csv
    )
    try:
        trainer.fit(Regressor(step_sleep=args.step_sleep), RandomRegression(), ckpt_path="last")
    except SIGTERMException:  # the stop: last.ckpt is written, the process ends cleanly
        print(f"stopped: saved last.ckpt at step {trainer.global_step}", flush=True)
    else:
        print(f"finished at step {trainer.global_step}", flush=True)
    if torch.distributed.is_initialized():  # gloo's threads, left to the interpreter's exit, can abort it
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
