"""An ordinary DDP script one of whose ranks falls asleep in the middle of an epoch while the others wait in DDP's
all-reduce: the hang tests of every backend run it."""

from __future__ import annotations

from typing import Any

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


def assert_rank_1_named(status: Any, named: str) -> dict[str, Any]:
    """``status`` (a hung 2-rank run's) ends with cause ``hang``, its message ``named`` rank 1 at its sleeping line
    with rank 0 waiting, and the grouped stacks rank 1's first; its failure details, for a backend's own checks."""
    from cloudddp.backends.status import Cause, RunState

    assert status.state is RunState.FAILED and status.cause is Cause.HANG, status
    assert status.message.startswith(named), status.message
    assert f"train.py:{SLEEP_LINE} in <module>: time.sleep(3600)" in status.message, status.message
    assert "rank 0: waiting in " in status.message, status.message
    failure: dict[str, Any] = status.details["failure"]
    assert failure["culprits"] == [1], failure
    assert failure["log_tail"][0] == "rank 1, most recent call first:", failure["log_tail"]
    assert any(line.startswith("rank 0 (waiting in ") for line in failure["log_tail"]), failure["log_tail"]
    return failure
