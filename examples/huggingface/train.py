"""A Hugging Face Trainer project as the transformers examples write one (run_clm.py's shape, tiny).

It runs unchanged on every cloudddp backend (job.yaml). What cloudddp needs from it, and nothing more:

- ``--output_dir`` is the training's checkpoint folder (``{{checkpoint_dir}}`` in job.yaml), and the run resumes
  from the newest ``checkpoint-N`` there, as run_clm.py does (``get_last_checkpoint``): a resubmit continues.
- ``StopSavesCallback``: the Trainer has no stop handling, so a SIGTERM (cancel, preemption, spot reclaim) would
  end the process where it is. The callback notes the signal, the ranks agree on it at the end of a step (one
  all-reduce of a flag), and the Trainer saves a checkpoint and stops, as its own ``should_save`` does.
- cloudddp reads the metrics from the Trainer's own log records (the ``{'loss': ...}`` lines rank 0 prints).

No weights or datasets are downloaded: a 2-layer GPT-2 made from a config, on random tokens.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from typing import Any

import torch
import torch.distributed as dist
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, samples: int, length: int, vocab: int) -> None:
        self.data = torch.randint(0, vocab, (samples, length), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.data[i], "labels": self.data[i]}


class StopSavesCallback(TrainerCallback):
    """On SIGTERM: save a checkpoint at the end of the current step on every rank, then stop."""

    def __init__(self, step_sleep: float = 0.0) -> None:
        self.stopping, self.stopped_at = False, None
        self.step_sleep = step_sleep
        signal.signal(signal.SIGTERM, self._heard)

    def _heard(self, signum: int, frame: Any) -> None:
        self.stopping = True

    def on_step_end(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.step_sleep:
            time.sleep(self.step_sleep)  # a stand-in for a real model's step time
        flag = torch.tensor([1 if self.stopping else 0])
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # every rank stops at the same step
        if flag.item():
            control.should_save = True
            control.should_training_stop = True
            self.stopped_at = state.global_step
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
    stop = StopSavesCallback(args.step_sleep)
    trainer = Trainer(
        model=model,
        args=training,
        train_dataset=RandomTokens(512, 32, config.vocab_size),
        callbacks=[stop],
    )
    last = get_last_checkpoint(args.output_dir) if os.path.isdir(args.output_dir) else None
    trainer.train(resume_from_checkpoint=last)
    if stop.stopped_at is not None:
        print(f"stopped: saved checkpoint-{stop.stopped_at}", flush=True)
    else:
        print(f"finished at step {trainer.state.global_step}", flush=True)


if __name__ == "__main__":
    main()
