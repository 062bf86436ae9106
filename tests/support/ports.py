"""Ports for the rigs' servers and rendezvous: free when asked for, and outside the kernel's ephemeral range.

A port the kernel hands out for ``bind(port 0)`` comes from the ephemeral range, the range from which every later
``bind(0)`` and every outgoing connection on the machine draws: torch's stores and agents, the tests' clients, the
daemons. A rig that asks the kernel for a free port, closes it and binds it again later can lose it in between to any
of those on a busy machine. One such loss (four workers) made an MPI rank fail with EADDRINUSE while the other
joined the stranger's listener and waited until the test timed out. Below that range the kernel gives a port to
nobody who did not ask for it by number. Each pytest-xdist worker draws from its own slice, so two workers of one
run never pick the same port; a second suite running beside this one draws at random in the same slices, and a
port it holds is seen taken.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

LOWEST = 10000
"""The lowest port drawn: above the ports that services commonly own by number."""
_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_port() -> int:
    """One port that nothing holds now, outside the ephemeral range and in this worker's slice."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports that nothing holds now (see :func:`free_port`)."""
    low, high = _this_workers_slice()
    draw = random.SystemRandom()
    chosen: list[int] = []
    for _ in range(100 * count):
        port = draw.randrange(low, high)
        if port not in chosen and _nobody_holds(port):
            chosen.append(port)
            if len(chosen) == count:
                return chosen
    raise RuntimeError(f"no {count} free ports in {low}-{high - 1} after {100 * count} draws")


def _this_workers_slice() -> tuple[int, int]:
    """This worker's share of the ports between :data:`LOWEST` and the ephemeral range (all of them without
    xdist)."""
    top = _ephemeral_start()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    workers = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1), 1)
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    width = (top - LOWEST) // workers
    start = LOWEST + (index % workers) * width
    return start, start + width


def _ephemeral_start() -> int:
    try:
        return int(_EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _nobody_holds(port: int) -> bool:
    """Bindable on every IPv4 address: a listener on any one address (loopback, the machine's) makes it fail."""
    with socket.socket() as probe:
        try:
            probe.bind(("", port))
        except OSError:
            return False
    return True
