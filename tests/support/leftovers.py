"""Stopping what a test left running: recovery watchers and local runs of its own cloudddp home, by the
process ids cloudddp recorded for them and, for a run's ranks (torchrun starts each in a session of its own, which
outlives its agent's group), by the run id their environment holds (never by name)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from cloudddp.backends.local.processes import run_processes


def stop_leftovers(home: Path) -> None:
    pids: list[int] = []
    for chain in (home / "chains").glob("*.json"):
        pids += _ints([_read(chain).get("watcher_pid")])
    ranks: list[int] = []
    for status in (home / "runs").glob("*/status.json"):
        data = _read(status)
        if data.get("state") not in ("succeeded", "failed", "cancelled"):
            pids += _ints([data.get("supervisor_pid"), data.get("store_pid"), *data.get("node_pgids", [])])
            ranks += run_processes(status.parent.name)
    # each of pids was started in a session of its own: its process group is its own
    for kill, pid in [*((os.killpg, pid) for pid in pids), *((os.kill, pid) for pid in ranks)]:
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _ints(values: list[object]) -> list[int]:
    return [v for v in values if isinstance(v, int) and v > 0]
