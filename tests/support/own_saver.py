"""A tutorial-style script that keeps its progress in ``snapshot.pt`` in its working folder (not cloudddp's shared
script): it loads the file at start if it exists and saves it every epoch, directly or, with ``--atomic``, through a
temporary file renamed over it (which replaces a link). Every backend's ``checkpoint.files`` test runs it."""

from __future__ import annotations

from pathlib import Path

SAVER = """
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://")  # RANK, WORLD_SIZE, MASTER_ADDR/PORT from the launcher
epochs, atomic = int(sys.argv[1]), "--atomic" in sys.argv
start = 0
if os.path.exists("snapshot.pt"):
    start = torch.load("snapshot.pt")["epoch"] + 1
    print(f"Resuming training from snapshot at Epoch {start}", flush=True)
dist.barrier()  # every rank has looked before rank 0 saves again
for epoch in range(start, start + epochs):
    if dist.get_rank() == 0:
        if atomic:
            torch.save({"epoch": epoch}, "snapshot.pt.tmp")
            os.replace("snapshot.pt.tmp", "snapshot.pt")
        else:
            torch.save({"epoch": epoch}, "snapshot.pt")
        print(f"Epoch {epoch} | Training snapshot saved at snapshot.pt", flush=True)
    dist.barrier()
dist.destroy_process_group()
"""


def saver_code(folder: Path) -> Path:
    """``folder/saver/train.py``: the script, in a code folder of its own."""
    code = folder / "saver"
    code.mkdir(parents=True, exist_ok=True)
    (code / "train.py").write_text(SAVER)
    return code


def saved_epochs(text: str) -> list[int]:
    """The epochs a run's output says were saved."""
    return [int(line.split("Epoch ")[1].split()[0]) for line in text.splitlines() if "snapshot saved" in line]
