"""A local run's processes, found in /proc by the run id in their environment: every one (for the last SIGKILL of
a stop), each rank's program (for the stall watchdog's stacks), and the secrets they were given (to mask them)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def run_processes(run_id: str) -> list[int]:
    """The live processes whose environment names run ``run_id`` (CLOUDDDP_RUN_ID), this one excepted."""
    marker = f"CLOUDDDP_RUN_ID={run_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def rank_processes(run_id: str) -> dict[tuple[int, int], tuple[int, int]]:
    """(node, local rank) -> (rank, pid) of the run's training processes: the first process of each (a rank's
    program may start Python processes of its own, which inherit its variables) that is not the rank launcher
    (:mod:`cloudddp.injob.shim`, the program's parent)."""
    found: dict[tuple[int, int], tuple[int, int]] = {}
    for pid in sorted(run_processes(run_id)):
        if _is_rank_launcher(pid):
            continue
        env = environ(pid)
        if "RANK" in env and "LOCAL_RANK" in env and "TORCHELASTIC_RUN_ID" in env:
            with contextlib.suppress(ValueError):
                key = (int(env.get("NODE_RANK", "0")), int(env["LOCAL_RANK"]))
                found.setdefault(key, (int(env["RANK"]), pid))
    return found


def _is_rank_launcher(pid: int) -> bool:
    try:
        return b"cloudddp.injob.shim" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False


def secrets_of(pids: list[int], names: list[str]) -> list[str]:
    """The values of the secret variables ``names`` in the environment of the first of ``pids`` that has them."""
    for pid in pids:
        env = environ(pid)
        if all(name in env for name in names):
            return [env[name] for name in names]
    return []
