"""A rank that sleeps 0.2 s in every step while the other works for milliseconds: the straggler watch inside the
ranks (cloudddp/injob/pace.py) names it, with its host, in the running run's status within three of its looks,
and in the metrics; the run then ends normally — a real torchrun run of an ordinary script."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.status import RunState
from cloudddp.runs.notes import STRAGGLER as DETAIL
from tests.support.cli import cli

EVERY_S = 3
SCRIPT = """\
import os, time
import torch, torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(2000):
    if rank == 1:
        time.sleep(0.2)  # the straggler's own work
    loss = torch.nn.functional.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step == 0 and rank == 0:
        open(os.environ["STEPPING_FLAG"], "w").close()
    done = torch.tensor([1.0 if os.path.exists(os.environ["DONE_FLAG"]) else 0.0])
    dist.all_reduce(done, op=dist.ReduceOp.MAX)  # every rank ends at the same step
    if done.item():
        break
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_rank_sleeping_in_every_step_is_named_with_its_host_in_status_within_three_looks(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    stepping, done = tmp_path / "stepping", tmp_path / "done"
    job = Job.from_dict(
        {
            "name": "straggler",
            "code": {"dir": str(tmp_path), "entry": "train.py"},
            "local": {"processes_per_node": 2},
            "checkpoint": {"enabled": False},
            "limits": {"straggler_every": f"{EVERY_S}s", "max_runtime": "10m"},
            "env": {"STEPPING_FLAG": str(stepping), "DONE_FLAG": str(done)},
        }
    )
    run = job.submit("local")
    try:
        deadline = time.monotonic() + 180
        while not stepping.exists():
            assert time.monotonic() < deadline and not run.status().state.terminal, run.status()
            time.sleep(0.2)
        stepped_at = time.monotonic()
        while DETAIL not in (status := run.status()).details:
            assert time.monotonic() - stepped_at < 3 * EVERY_S, status
            time.sleep(0.3)
        named = status.details[DETAIL]
        assert named.startswith(f"rank 1 on node 0 ({socket.gethostname()}): 0.2"), named
        assert named.endswith("the others wait for it"), named
        shown = cli("status", run.run_id)  # what a person sees
        assert "straggler" in shown.stdout and f"rank 1 on node 0 ({socket.gethostname()})" in shown.stdout, shown
    finally:
        done.touch()
    status = run.wait(timeout=120, poll=0.5)
    assert status.state is RunState.SUCCEEDED, status
    assert DETAIL not in status.details, status.details  # a warning of a running run only
    records = [r for r in run.metrics() if "straggler_rank" in r.values]
    assert records and records[0].values["straggler_rank"] == 1 and records[0].values["straggler_ratio"] > 5, records
