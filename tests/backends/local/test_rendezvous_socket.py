"""The local rendezvous socket, on its own: bound from the instant its port exists, and known to be the
port's only listener before the agents are told the port."""

from __future__ import annotations

import socket

import pytest

from cloudddp.backends.local.rendezvous import listening_socket, port_of, sole_listener


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
