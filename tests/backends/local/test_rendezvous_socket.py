"""The local rendezvous socket: bound from the instant its port exists, and known to be the port's only listener
before the agents are told the port (on its own, and as the supervisor starts the store)."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest

from cloudddp.backends.local.rendezvous import listening_socket, port_of, sole_listener
from cloudddp.backends.local.rundir import RunDir
from cloudddp.backends.local.supervisor import StoreFailed, start_store


def test_the_socket_holds_its_port_against_every_later_bind() -> None:
    with listening_socket() as ours:
        port = port_of(ours.fileno())
        assert sole_listener(ours.fileno())
        for host in ("127.0.0.1", "0.0.0.0"):
            with socket.socket() as late:
                late.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                with pytest.raises(OSError, match="Address already in use"):
                    late.bind((host, port))


def test_a_second_listener_on_the_port_is_seen() -> None:
    """``SO_REUSEPORT`` lets a socket of the same user share a port: then the store's socket is not the only one the
    agents may reach, and the supervisor does not take the store for ready."""
    with socket.socket() as first, socket.socket() as second:
        for s in (first, second):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        first.bind(("127.0.0.1", 0))
        first.listen()
        assert sole_listener(first.fileno())
        second.bind(("127.0.0.1", first.getsockname()[1]))
        second.listen()
        assert not sole_listener(first.fileno())


def test_the_supervisor_takes_no_store_for_ready_while_another_socket_listens_on_its_port(tmp_path: Path) -> None:
    """The store, started as the supervisor starts it, is ready on its own word only while its socket is the port's
    sole listener: another listener on the same port (here on 127.0.0.2, so the store's own check through
    127.0.0.1 still succeeds) makes the start fail."""
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    with listening_socket() as ours:
        store = start_store(run, ours.fileno())  # alone on its port: ready
        os.kill(store.pid, signal.SIGKILL)
        with socket.socket() as other:
            other.bind(("127.0.0.2", port_of(ours.fileno())))
            other.listen()
            with pytest.raises(StoreFailed, match="the rendezvous store did not start"):
                start_store(run, ours.fileno())
