"""``cloudddp stacks`` on a local run: each rank's program process on this machine asked once for its stacks
(:mod:`cloudddp.injob.rank_stacks`), and what the signalled ones write read from the run's log as the supervisor
copies it there (``logs/node<i>.log``, each line behind torchrun's ``[rank<r>]:``)."""

from __future__ import annotations

import socket
from dataclasses import asdict
from pathlib import Path

from cloudddp.backends.local.rundir import RunDir
from cloudddp.injob.culprit import Capture, captured
from cloudddp.injob.rank_stacks import answered, ask_all, gather
from cloudddp.injob.shim import RANK_LINE


class _Tail:
    """The lines a file gains from now on."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0
        self.partial = b""

    def lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return []
        self.offset += len(chunk)
        *complete, self.partial = (self.partial + chunk).split(b"\n")
        return [line.decode("utf-8", errors="replace") for line in complete]


def ranked(lines: list[str]) -> list[tuple[int, str]]:
    """``(rank, text)`` of each line a rank printed (its ``[rank<r>]:`` prefix), torchrun's own left out."""
    return [(int(tag.group(1)), line[tag.end() :]) for line in lines if (tag := RANK_LINE.match(line))]


def capture(run: RunDir) -> Capture:
    """Every rank's stacks now; the run goes on."""
    tails = [_Tail(path) for path in run.node_logs()]  # before any rank is asked: nothing it writes is missed
    answers = ask_all([f"CLOUDDDP_RUN_ID={run.run_id}"], "NODE_RANK", socket.gethostname())
    dumps = gather(
        lambda: ranked([line for tail in tails for line in tail.lines()]),
        [a.rank for a in answers if a.how == "signal"],
    )
    return captured(asdict(a) for a in answered(answers, dumps))
