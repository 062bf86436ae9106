"""A run's log lines on the cluster: read through the shell, tagged with the process that printed them, and
put in the order they were printed across the node files.

Each node writes its own file (``logs/node<i>.log``), so lines from several files are merged here. Within
one start of the training (a Slurm run; a torchrun restart) only global rank 0 reports metrics, whichever
node it landed on, so ordering by *start* is what keeps a requeued job's metrics in step order: every
process announces itself when it starts (``cloudddp: rank R of W (local rank L)``), the batch script
marks each Slurm run (``cloudddp: run N ...``), and the lines of each poll are sorted by the start they
belong to, file order kept within it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Sequence

from cloudddp.backends.slurm.script import START_MARK
from cloudddp.backends.slurm.shell import READ_CAP, Shell
from cloudddp.backends.status import LogLine

_TEE = re.compile(r"\[default(\d+)\]:")  # torchrun --tee: the local rank
_ANNOUNCE = re.compile(r"cloudddp: rank (\d+) of \d+ \(local rank (\d+)\)$")


def follow_batches(
    shell: Shell, paths: Sequence[str], *, follow: bool, finished: Callable[[], bool], poll: float
) -> Iterator[list[tuple[int, str]]]:
    """The complete lines of files on the cluster as ``(index of the file, line)``, a batch per read (one
    command reads every file); with ``follow``, wait for more until ``finished()`` is true, then drain."""
    offsets = [0] * len(paths)
    partial = [b""] * len(paths)
    while True:
        done = finished() if follow else True  # read the flag before draining, so nothing is lost
        chunks = shell.read_from(list(zip(paths, offsets, strict=True)))
        batch: list[tuple[int, str]] = []
        more = False
        for i, chunk in enumerate(chunks):
            if not chunk:
                continue
            more = more or len(chunk) >= READ_CAP
            offsets[i] += len(chunk)
            *lines, partial[i] = (partial[i] + chunk).split(b"\n")
            batch += [(i, line.removesuffix(b"\r").decode("utf-8", errors="replace")) for line in lines]
        if batch:
            yield batch
        if done and not batch:
            rest = [(i, tail.decode("utf-8", errors="replace")) for i, tail in enumerate(partial) if tail]
            if rest:
                yield rest
            return
        if not more:
            time.sleep(poll if not batch else min(poll, 0.05))


class Labels:
    """Which process printed each line, and which start of the training it belongs to. Index 0 is the batch
    log (source ``slurm``); index ``i`` is node ``i - 1``. torchrun prefixes a line with the local rank
    (``[default<local>]:``), ``srun --label`` with the task id (``<rank>: ``), which is the global rank."""

    def __init__(self, nodes: int, *, per_task: bool, per_node: int) -> None:
        self.nodes, self.per_task, self.per_node = nodes, per_task, per_node
        self.ranks: dict[tuple[int, int], int] = {}
        self.starts = [-1] * (nodes + 1)  # per file: how many starts it has shown

    def ordered(self, batch: Sequence[tuple[int, str]]) -> list[LogLine]:
        """One read's lines, labelled, sorted by the start they belong to (stable within it)."""
        tagged = [self.line(index, text) for index, text in batch]
        return [line for line, _ in sorted(tagged, key=lambda pair: pair[1])]

    def line(self, index: int, text: str) -> tuple[LogLine, int]:
        if index == 0:
            if text.startswith(START_MARK):
                self.starts[0] += 1
            return LogLine("slurm", text, primary=False), max(self.starts[0], 0)
        node = index - 1
        rank: int | None = None
        local: int | None = None
        if self.per_task:
            label, sep, rest = text.partition(": ")
            if sep and label.strip().isdigit():
                rank, text = int(label), rest
                local = rank - node * self.per_node
        else:
            tee = _TEE.match(text)
            if tee:
                local, text = int(tee.group(1)), text[tee.end() :]
        announced = _ANNOUNCE.match(text) if local is not None else None
        if announced and local is not None:
            rank = self.ranks[node, local] = int(announced.group(1))
            if local == 0:
                self.starts[index] += 1
            return LogLine(self._source(node, rank), text, primary=False, rank=rank), max(self.starts[index], 0)
        if rank is None and local is not None:
            rank = self.ranks.get((node, local))
        start = max(self.starts[index], 0)
        if rank is None:  # torchrun's or slurmstepd's own words
            where = f"node{node}/local{local}" if local is not None else f"node{node}"
            return LogLine(where, text, primary=False), start
        return LogLine(self._source(node, rank), text, primary=rank == 0, rank=rank), start

    def _source(self, node: int, rank: int) -> str:
        return f"rank{rank}" if self.nodes == 1 else f"node{node}/rank{rank}"
