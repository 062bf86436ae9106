"""The rigs' ports (tests/support/ports.py): never from the range the kernel hands out by itself, never one a process
holds, and never the same for two workers of one run."""

from __future__ import annotations

import itertools
import socket
from pathlib import Path

import pytest

from tests.support import ports


def test_ports_are_distinct_free_and_below_the_ephemeral_range() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    drawn = ports.free_ports(50)
    assert len(set(drawn)) == 50
    assert all(ports.LOWEST <= port < low for port in drawn), drawn
    for port in drawn:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free: binding it works


def test_a_port_someone_listens_on_is_never_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.create_server(("127.0.0.1", 0)) as held:
        taken = held.getsockname()[1]
        monkeypatch.setattr(ports, "_this_workers_slice", lambda: (taken, taken + 2))
        assert ports.free_ports(1) == [taken + 1]


def test_each_worker_draws_from_its_own_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    slices = []
    for worker in ("gw0", "gw1", "gw2", "gw3"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        slices.append(ports._this_workers_slice())
        assert all(slices[-1][0] <= p < slices[-1][1] for p in ports.free_ports(20))
    for (_, end), (start, _) in itertools.pairwise(slices):
        assert end <= start, slices  # no overlap
    assert slices[0][0] == ports.LOWEST and slices[-1][1] <= ports._ephemeral_start()
