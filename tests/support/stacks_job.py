"""A healthy DDP job for ``cloudddp stacks``: every rank trains slowly (a DataLoader worker each, whose process
carries the rank's variables too) and rank 0 checkpoints after every epoch (4 steps), until a flag file appears;
then it trains ``AFTER`` more epochs and ends. What ``cloudddp stacks`` printed is read back rank by rank."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Iterable
from contextlib import suppress
from pathlib import Path

import torch

from cloudddp.backends.status import LogLine
from tests.support.waiting import wait_until

SCRIPT = """\
import os, time
import torch, torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
rank = dist.get_rank()
folder = os.environ["CHECKPOINTS"]
flag = os.environ["STACKS_DONE_FLAG"]
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
loader = DataLoader(data, batch_size=4, sampler=DistributedSampler(data), num_workers=1)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
step, left = 0, None
while left != 0:
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        step += 1
        print(f"rank {rank} step {step}", flush=True)
        time.sleep(0.3)
    if left is None:
        done = torch.tensor([float(os.path.exists(flag))])
        dist.all_reduce(done)
        left = AFTER if done.item() else None
    else:
        left -= 1
    if rank == 0:
        torch.save({"step": step, "model": model.module.state_dict()}, os.path.join(folder, "tmp.pt"))
        os.replace(os.path.join(folder, "tmp.pt"), os.path.join(folder, "last.pt"))
print(f"rank {rank} finished at step {step}", flush=True)
dist.destroy_process_group()
"""
AFTER = 2
HEADING = re.compile(r"^ranks? ([\d, ]+?)(?: \(waiting in .*\))?, most recent call first:$", re.M)


def write_script(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text(SCRIPT.replace("AFTER", str(AFTER)))
    return folder


def ranks_shown(printed: str) -> list[int]:
    """Every rank a group heading of ``cloudddp stacks``' text names, as often as it is named."""
    return sorted(int(r) for heading in HEADING.findall(printed) for r in heading.split(", "))


def last_checkpoint(folder: Path) -> int:
    """The step of the checkpoint rank 0 wrote last (it loads: the file is whole)."""
    return int(torch.load(folder / "last.pt", weights_only=True)["step"])


def steps_of(log: str) -> dict[int, int]:
    """rank -> the step it finished at."""
    return {int(r): int(s) for r, s in re.findall(r"rank (\d+) finished at step (\d+)", log)}


def wait_for_steps(text: Callable[[], str], ranks: int, timeout: float = 180) -> None:
    """Until every rank has printed a step."""
    deadline = time.monotonic() + timeout
    while len(set(re.findall(r"rank (\d+) step \d+", text()))) < ranks:
        assert time.monotonic() < deadline, text()[-3000:]
        time.sleep(0.5)


def dumps_per_rank(lines: Iterable[LogLine]) -> dict[int, int]:
    """rank -> how many stack dumps it wrote to the log (each has one ``Current thread`` heading)."""
    heads = [line.rank for line in lines if line.rank is not None and line.text.startswith("Current thread")]
    return dict(Counter(heads))


def assert_dumps_in_the_log(logs: Callable[[], Iterable[LogLine]], expected: dict[int, int]) -> None:
    """Assert that the log holds ``expected`` stack dumps of each rank (:func:`dumps_per_rank`), waiting until it
    holds at least as many (the log's copy follows the ranks' output by a moment, seconds on a loaded machine) or 30 s
    have passed; a rank asked more often than expected shows more, never fewer. On failure it shows every line that
    names a thread, with its rank, so a mangled or missing heading can be told apart from a dump never written."""

    def all_there() -> bool:
        found = dumps_per_rank(logs())
        return all(found.get(rank, 0) >= count for rank, count in expected.items())

    with suppress(TimeoutError):
        wait_until(all_there, timeout=30, poll=0.5)
    lines = list(logs())
    heads = [f"{line.rank}: {line.text[:100]}" for line in lines if "thread 0x" in line.text.lower()]
    assert dumps_per_rank(lines) == expected, "\n".join(heads)
