"""Metrics from a framework's own log files, read in the job, on the local backend with real torchrun."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import cli

pytestmark = pytest.mark.slow

LIGHTNING = """
import torch
from torch.utils.data import DataLoader, TensorDataset
import lightning as L
from lightning.pytorch.loggers import CSVLogger


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        self.log("marker", 7.0 + self.global_step)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    trainer = L.Trainer(
        accelerator="cpu", devices=2, max_steps=5, log_every_n_steps=1, logger=CSVLogger("logs"),
        enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False,
    )
    trainer.fit(Tiny(), DataLoader(data, batch_size=8))
    torch.distributed.destroy_process_group()  # gloo's threads, left to the interpreter's exit, can abort it
"""


def project(folder: Path, script: str, processes: int) -> Path:
    folder.mkdir()
    (folder / "train.py").write_text(script)
    spec = folder / "job.yaml"
    spec.write_text(f"name: fw\ncode: {{dir: ., entry: train.py}}\nlocal: {{processes_per_node: {processes}}}\n")
    return spec


def run_id_of(submitted: str) -> str:
    return submitted.split("submitted ")[1].split(maxsplit=1)[0]


def test_a_lightning_csv_logger_s_values_come_back_as_metrics(tmp_path: Path) -> None:
    done = cli("submit", str(project(tmp_path / "lit", LIGHTNING, 2)), "-b", "local", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    shown = cli("metrics", run_id_of(done.stderr), "--json")
    assert shown.returncode == 0, shown.stderr
    records = [json.loads(line) for line in shown.stdout.splitlines()]
    # 64 samples, batches of 8, 2 ranks: 4 steps an epoch
    assert [(r["step"], r["epoch"], r["marker"]) for r in records] == [(s, s // 4, 7.0 + s) for s in range(5)]
    assert all(r["train_loss"] > 0 for r in records)  # once each: rank 1 writes no file, rank 0's rows once


def test_a_run_without_metrics_says_why_and_what_to_add(tmp_path: Path) -> None:
    done = cli("submit", str(project(tmp_path / "plain", "print('trained')\n", 1)), "-b", "local", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    shown = cli("metrics", run_id_of(done.stderr), "--json")
    told = " ".join(shown.stderr.split())
    assert shown.returncode == 0 and shown.stdout == "", shown
    assert "has no metrics" in told and "CSVLogger" in told and "CLOUDDDP_METRIC" in told, told
