"""Helpers for tests that inject faults into real runs: find a run's rank processes, signal them."""

from __future__ import annotations

import time
from pathlib import Path


def rank_processes(run_dir: str) -> dict[int, tuple[int, int]]:
    """rank -> (pid, restart attempt) of the live worker processes of the run in ``run_dir``."""
    found: dict[int, tuple[int, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "environ").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            continue
        env = dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
        if run_dir in env.get("CLOUDDDP_MODEL_DIR", "") and "RANK" in env and "TORCHELASTIC_RUN_ID" in env:
            found[int(env["RANK"])] = (int(entry.name), int(env.get("TORCHELASTIC_RESTART_COUNT", "0")))
    return found


def wait_for_rank(run_dir: str, rank: int, *, attempt: int = 0, timeout: float = 120) -> int:
    """The pid of ``rank`` in restart ``attempt``, once it is up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        procs = rank_processes(run_dir)
        if rank in procs and procs[rank][1] == attempt:
            return procs[rank][0]
        time.sleep(0.1)
    raise TimeoutError(f"rank {rank} attempt {attempt} did not start in {timeout} s")


def kill_node(run_dir: str, node: int) -> list[int]:
    """Lose a whole local "node", as when its machine goes: SIGKILL its torchrun agent (and its process
    group) and every rank it started (torchrun gives each rank a session of its own). The pids killed."""
    import json
    import os
    import signal

    agent = json.loads((Path(run_dir) / "status.json").read_text())["node_pgids"][node]
    ranks = []
    for entry in Path("/proc").iterdir():
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if (
            f"CLOUDDDP_MODEL_DIR={run_dir}/outputs".encode() in env
            and f"NODE_RANK={node}".encode() in env
            and entry.name.isdigit()
            and int(entry.name) != agent
        ):
            ranks.append(int(entry.name))
    os.killpg(agent, signal.SIGKILL)
    for pid in ranks:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return [agent, *ranks]


def processes_naming(run_dir: str) -> list[int]:
    """The live processes whose argv or environment names the run's folder (its supervisor, store, agents, ranks)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            raw = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if run_dir.encode() in raw and state != "Z":
            found.append(int(entry.name))
    return found
