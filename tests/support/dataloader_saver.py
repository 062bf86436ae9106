"""A user's own DDP script, written as tutorials write them (not cloudddp's shared script): a ``DataLoader`` with
``num_workers=2``, and on SIGTERM it finishes its step, takes a deliberately slow ``--save-delay`` seconds (a big
model's save), writes its checkpoint into ``$CLOUDDDP_CHECKPOINT_DIR`` and exits 0. With ``--save-every N`` it also
saves ``state.pt`` in its working folder every N steps (a temporary file renamed into place), which a job keeps
with ``checkpoint.files``. A rerun resumes from the newer of the two.

What a stop must give such a script: one SIGTERM per rank, from its parent (a DataLoader worker signalled
by anyone else dies and the script crashes with ``DataLoader worker (pid N) is killed by signal``), and the whole
grace (torchrun's agent SIGKILLs its ranks 30 s after passing a SIGTERM on unless told otherwise). Each backend's
stop test runs it: :func:`dataloader_saver_code` writes it, the helpers below read what its output says.
"""

from __future__ import annotations

import re
from pathlib import Path

SCRIPT = """
import argparse
import os
import signal
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, required=True, help="steps this run trains (after a resume too)")
parser.add_argument("--save-delay", type=float, default=60.0, help="seconds the save takes after a SIGTERM")
parser.add_argument("--step-time", type=float, default=0.2)
parser.add_argument("--save-every", type=int, default=0, help="save state.pt here every N steps (0: never)")
args = parser.parse_args()

stop = []
def on_sigterm(number, frame):
    print(f"rank {os.environ['RANK']} got SIGTERM", flush=True)
    stop.append(number)
signal.signal(signal.SIGTERM, on_sigterm)

dist.init_process_group("gloo", init_method="env://")  # RANK, WORLD_SIZE, MASTER_ADDR/PORT from the launcher
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
path = os.path.join(os.environ["CLOUDDDP_CHECKPOINT_DIR"], "dataloader-saver.pt")
own = "state.pt"  # --save-every: saved every N steps in the working folder, by rename, as tutorials do
step = epoch = 0
states = [torch.load(found) for found in (path, own) if os.path.exists(found)]
if states:
    state = max(states, key=lambda s: s["step"])
    model.module.load_state_dict(state["model"])
    step, epoch = state["step"], state["epoch"]
    print(f"rank {rank} resumed at step {step} epoch {epoch}", flush=True)
data = TensorDataset(torch.randn(512, 8), torch.randn(512, 1))
sampler = DistributedSampler(data)
loader = DataLoader(data, batch_size=4, sampler=sampler, num_workers=2)  # WORKERS

def save():
    time.sleep(args.save_delay)  # a slow save: the grace must hold
    if rank == 0:
        torch.save({"model": model.module.state_dict(), "step": step, "epoch": epoch}, path + ".tmp")
        os.replace(path + ".tmp", path)
        print(f"saved at step {step} epoch {epoch}", flush=True)
    dist.barrier()

last = step + args.steps


def train():  # up to step `last`; True when a stop ended it (every rank at the same step)
    global step, epoch
    while True:
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            step += 1
            if rank == 0:
                print(f"dataloader-saver step {step} loss {loss.item():.4f}", flush=True)
            if args.save_every and step % args.save_every == 0:
                if rank == 0:
                    torch.save({"model": model.module.state_dict(), "step": step, "epoch": epoch}, own + ".tmp")
                    os.replace(own + ".tmp", own)
                    print(f"kept state.pt at step {step} epoch {epoch}", flush=True)
                dist.barrier()
            time.sleep(args.step_time)
            stopping = torch.tensor([float(bool(stop))])
            dist.all_reduce(stopping)  # the ranks agree: a stop heard by any rank ends this step on every rank
            if stopping.item():
                return True
            if step == last:
                return False
        epoch += 1


if train():
    print(f"rank {rank} stopping at step {step} epoch {epoch}", flush=True)
    save()
else:
    print(f"rank {rank} finished at step {step} epoch {epoch}", flush=True)
dist.destroy_process_group()
"""
ENTRY = "train.py"
RUNNING = "dataloader-saver step 5"
"""A line rank 0 prints once training runs, DataLoader workers and all: a test's moment to stop it."""
_SAVED = re.compile(r"saved at step (\d+) epoch (\d+)")
_RESUMED = re.compile(r"rank (\d+) resumed at step (\d+) epoch (\d+)")
_GOT = re.compile(r"rank (\d+) got SIGTERM")
WORKER_KILLED = re.compile(r"DataLoader worker \(pid \S+\) is killed by signal")
METRICS = [
    {"name": "step", "regex": r"dataloader-saver step (\d+) loss "},
    {"name": "loss", "regex": r"dataloader-saver step \d+ loss ([0-9.]+)"},
]
"""The job's ``metrics``: the script prints its loss in its own words."""


def dataloader_saver_code(folder: Path) -> Path:
    """``folder/dataloader-saver/train.py``: the script, in a code folder of its own. Its workers do nothing about
    SIGTERM: cloudddp spares them on every backend (on Slurm, whose stop signals them too, by its hooks in the
    script's process)."""
    code = folder / "dataloader-saver"
    code.mkdir(parents=True, exist_ok=True)
    (code / ENTRY).write_text(SCRIPT)
    return code


_KEPT = re.compile(r"kept state.pt at step (\d+) epoch (\d+)")


def kept(text: str) -> list[tuple[int, int]]:
    """(step, epoch) of every ``state.pt`` the script says it wrote in its working folder (``--save-every``)."""
    return [(int(m.group(1)), int(m.group(2))) for m in _KEPT.finditer(text)]


def saved(text: str) -> list[tuple[int, int]]:
    """(step, epoch) of every checkpoint a run's output says it saved."""
    return [(int(m.group(1)), int(m.group(2))) for m in _SAVED.finditer(text)]


def resumed(text: str) -> dict[int, tuple[int, int]]:
    """rank -> (step, epoch) each rank says it resumed at."""
    return {int(m.group(1)): (int(m.group(2)), int(m.group(3))) for m in _RESUMED.finditer(text)}


def sigterms(text: str) -> dict[int, int]:
    """rank -> how many times that rank's script said it got SIGTERM."""
    counts: dict[int, int] = {}
    for m in _GOT.finditer(text):
        counts[int(m.group(1))] = counts.get(int(m.group(1)), 0) + 1
    return counts
