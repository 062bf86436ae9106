"""A Hugging Face Trainer project as the transformers examples write one (run_clm.py's shape, tiny).

It runs unchanged on every cloudddp backend (job.yaml), and nothing in it is there for cloudddp:

- ``--output_dir`` is the training's checkpoint folder (``{{checkpoint_dir}}`` in job.yaml), where the Trainer
  writes its ``checkpoint-N`` folders.
- cloudddp reads the metrics from the Trainer's own log records (the ``{'loss': ...}`` lines rank 0 prints).

A stop (cancel, preemption, spot reclaim) is cloudddp's business (docs/frameworks/huggingface.md): its hooks in the
script's process make the Trainer save ``checkpoint-N`` at a step every rank agrees on and end the script, and
``trainer.train()`` resumes from the newest complete one in the checkpoint folder (the Trainer skips the batches
the interrupted epoch had trained and restores each rank's random state).

No weights or datasets are downloaded: a 2-layer GPT-2 made from a config, on random tokens.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, samples: int, length: int, vocab: int) -> None:
        self.data = torch.randint(0, vocab, (samples, length), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.data[i], "labels": self.data[i]}


class SlowSteps(TrainerCallback):
    """A stand-in for a real model's step time (``--step_sleep``)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_step_end(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any) -> Any:
        time.sleep(self.seconds)
        return control


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default="hf-out")
    parser.add_argument("--max_steps", type=int, default=60)
    parser.add_argument("--save_steps", type=int, default=20)
    parser.add_argument("--step_sleep", type=float, default=0.0)
    args = parser.parse_args()

    config = GPT2Config(vocab_size=256, n_positions=64, n_embd=32, n_layer=2, n_head=2)
    model = GPT2LMHeadModel(config)
    training = TrainingArguments(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=8,
        learning_rate=5e-4,
        logging_steps=5,
        save_steps=args.save_steps,
        save_total_limit=2,
        report_to="none",
        dataloader_num_workers=2,
        disable_tqdm=True,  # a log file is not a terminal
        seed=0,
    )
    trainer = Trainer(
        model=model,
        args=training,
        train_dataset=RandomTokens(512, 32, config.vocab_size),
        callbacks=[SlowSteps(args.step_sleep)] if args.step_sleep else [],
    )
    trainer.train()
    print(f"finished at step {trainer.state.global_step}", flush=True)


if __name__ == "__main__":
    main()
