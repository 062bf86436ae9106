"""An ordinary DDP script one of whose ranks falls asleep in the middle of an epoch while the others wait in DDP's
all-reduce: the hang tests of every backend run it."""

from __future__ import annotations

TIMEOUT_S = 10
"""The job's ``distribution.collective_timeout``: how long the others wait before theirs times out."""
_SCRIPT = """\
import datetime, os, time
import torch, torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(os.environ["CLOUDDDP_COLLECTIVE_TIMEOUT"])))
rank = dist.get_rank()
data = TensorDataset(torch.randn(256, 4), torch.randn(256, 1))
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step, (x, y) in enumerate(DataLoader(data, batch_size=8, sampler=DistributedSampler(data))):
    if rank == CULPRIT and step == 5:
        print(f"rank {rank} sleeps", flush=True)
        open(os.environ["SLEEPS_FLAG"], "w").close() if "SLEEPS_FLAG" in os.environ else None
        time.sleep(3600)
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    print(f"rank {rank} step {step}", flush=True)
"""
SLEEP_LINE = next(n for n, line in enumerate(_SCRIPT.splitlines(), 1) if "time.sleep(3600)" in line)
"""The line the culprit sleeps on: what its verdict names (``train.py:14 in <module>: time.sleep(3600)``)."""


def script(culprit: int = 1) -> str:
    """The script, rank ``culprit`` the one that sleeps (it touches ``$SLEEPS_FLAG`` first, where that is set)."""
    return _SCRIPT.replace("CULPRIT", str(culprit))
