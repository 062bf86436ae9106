"""A Lightning project as Lightning's own examples write one: a LightningModule, a DataModule, a Trainer.

It runs unchanged on every cloudddp backend (job.yaml), and nothing in it is there for cloudddp:

- ``--num-nodes`` and ``--devices`` from the job's shape (``{{nodes}}``, ``{{processes_per_node}}`` in job.yaml):
  Lightning checks that devices × num_nodes is the world size torchrun (or srun) started.
- ``--root`` is the training's checkpoint folder (``{{checkpoint_dir}}``): Lightning's checkpoints and its
  CSVLogger's ``metrics.csv`` go there, so a resubmit resumes (``ckpt_path="last"``) and cloudddp reads the
  metrics from the file as they are written (every 10 steps here; Lightning's default is 100).

A stop (cancel, preemption, spot reclaim) is cloudddp's business (docs/frameworks/lightning.md): its hooks in the
script's process save ``last.ckpt`` at a step every rank agrees on and end the fit, and the resume skips the
batches the interrupted epoch had trained; the DataLoader workers ignore the stop's SIGTERM.

The data is made here (no download): a fixed random regression task, so any machine can run it.
"""

from __future__ import annotations

import argparse
import os

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
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
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=self.batch_size, num_workers=0)


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
        callbacks=[checkpoint],
        log_every_n_steps=5,
        enable_progress_bar=False,  # a log file is not a terminal; cloudddp reads metrics from metrics.csv
    )
    trainer.fit(Regressor(step_sleep=args.step_sleep), RandomRegression(), ckpt_path="last")
    print(f"finished at step {trainer.global_step}", flush=True)
    if torch.distributed.is_initialized():  # gloo's threads, left to the interpreter's exit, can abort it
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
