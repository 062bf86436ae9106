"""An Accelerate project as Accelerate's own examples write one (nlp_example.py's shape, tiny): a plain PyTorch loop
that ``accelerator.prepare`` distributes, with ``save_state``/``load_state`` checkpoints and a tracker.

It runs unchanged on every cloudddp backend (job.yaml). What cloudddp needs from it, and nothing more:

- ``--output_dir`` is the training's checkpoint folder (``{{checkpoint_dir}}`` in job.yaml): ``save_state``
  writes ``checkpoints/checkpoint_N`` there (the newest two are kept) and a resubmit loads the newest.
- A stop (SIGTERM) sets Accelerate's trigger; ``check_trigger`` agrees on it across the ranks at the end of a
  step, and every rank saves the state and returns.
- The tensorboard tracker's event files are in the checkpoint folder too: cloudddp reads the metrics from them.
- Nothing for the CPU: where the job has no GPU, cloudddp sets ``ACCELERATE_USE_CPU=true`` (without it,
  Accelerate on a machine without GPUs trains each process alone).

The data is made here (no download): a fixed random classification task.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration, set_seed
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Progress:
    """The loop's position, saved with the model by ``save_state`` (``register_for_checkpointing``)."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default="accelerate-out")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--save_every", type=int, default=20, help="steps between checkpoints")
    parser.add_argument("--step_sleep", type=float, default=0.0)
    args = parser.parse_args()

    project = ProjectConfiguration(project_dir=args.output_dir, automatic_checkpoint_naming=True, total_limit=2)
    accelerator = Accelerator(log_with="tensorboard", project_config=project)
    set_seed(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2048, 20, generator=g)
    y = (x[:, :4].sum(dim=1) > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, num_workers=2)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    def say(message: str) -> None:  # once per job (accelerator.print speaks once per node)
        if accelerator.is_main_process:
            print(message, flush=True)

    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    # flush_secs: torch's SummaryWriter writes its events every 120 s by default; cloudddp reads them as written
    accelerator.init_trackers("accelerate-example", init_kwargs={"tensorboard": {"flush_secs": 5}})
    signal.signal(signal.SIGTERM, lambda signum, frame: accelerator.set_trigger())

    checkpoints = os.path.join(args.output_dir, "checkpoints")
    if os.path.isdir(checkpoints) and os.listdir(checkpoints):
        newest = max(os.listdir(checkpoints), key=lambda name: int(name.rsplit("_", 1)[-1]))
        accelerator.load_state(os.path.join(checkpoints, newest))
        project.iteration = int(newest.rsplit("_", 1)[-1]) + 1  # the next save gets the next number
        say(f"resumed from {newest} at step {progress.step}")

    per_epoch = len(loader)
    for epoch in range(progress.step // per_epoch, args.epochs):
        done_in_epoch = progress.step - epoch * per_epoch
        batches = accelerator.skip_first_batches(loader, done_in_epoch) if done_in_epoch else loader
        model.train()
        for inputs, targets in batches:
            loss = nn.functional.cross_entropy(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            progress.step += 1
            if args.step_sleep:
                time.sleep(args.step_sleep)  # a stand-in for a real model's step time
            if progress.step % 5 == 0:
                accelerator.log({"train_loss": accelerator.gather(loss.detach()).mean().item()}, step=progress.step)
            if accelerator.check_trigger():  # a stop, agreed by every rank
                accelerator.save_state()
                say(f"stopped: saved at step {progress.step}")
                accelerator.end_training()
                return
            if progress.step % args.save_every == 0:
                accelerator.save_state()
    accelerator.end_training()
    say(f"finished at step {progress.step}")


if __name__ == "__main__":
    main()
