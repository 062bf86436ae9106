"""The local run's rendezvous: a store only this machine can reach, on a socket bound before anyone can learn its
port, joined by an id only the job knows.

torchrun's c10d host binds its TCPStore to every interface (TCPStore has no bind address) and the agents
unpickle the rendezvous state they read from it under ``torch.rendezvous.<rdzv id>``: whoever answers on the
store's port can plant that state and run code as the job's user. So here no agent hosts the store
(``--rdzv-conf is_host=0`` on every node):

- launch binds a socket to 127.0.0.1 on a port the kernel picks (:func:`listening_socket`) and keeps it bound
  from that instant: the port is known to nobody before it is ours, so no other process can take it first (and
  no collision can happen between picking it and using it);
- the socket is handed down as a descriptor (launch -> supervisor -> the store process and every node's agent),
  never re-bound: the store serves it (``TCPStore(master_listen_fd=...)``), and while any process of the run
  lives the port stays bound, so a store that died leaves the agents waiting, not talking to a newcomer;
- the store is trusted only when it says so over a private pipe, after writing a random key into the store it
  serves and reading it back through 127.0.0.1:port, the way the agents reach it (:func:`verified`), and while the
  socket handed down is the port's only listener (:func:`sole_listener`); "something accepts connections on the
  port" is never taken for it;
- the id is 128 random bits the supervisor makes and passes in ``PET_RDZV_ID`` (torchrun reads it when
  ``--rdzv-id`` is absent). A process's environment is readable by its own user only; its argv by everyone.

``python -m cloudddp.backends.local.store_server --fd FD RUN_DIR`` serves the handed socket while the run lives;
``--port PORT`` (the plan's hand-run script) binds one itself.
"""

from __future__ import annotations

import os
import secrets
import socket
from datetime import timedelta
from typing import Any

LOOPBACK = "127.0.0.1"
ID_VARIABLE = "PET_RDZV_ID"
READY = "cloudddp-store-ready"
"""The line the store process prints (to its parent's pipe) once :func:`verified` holds."""
_CHECK_KEY = "cloudddp.store.check"


def new_rdzv_id() -> str:
    """128 random bits, hex: a rendezvous nobody outside the job can name."""
    return secrets.token_hex(16)


def listening_socket(port: int = 0) -> socket.socket:
    """A socket listening on 127.0.0.1 (port 0: one the kernel picks, which nothing else holds)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((LOOPBACK, port))
        sock.listen(512)
    except OSError:
        sock.close()
        raise
    return sock


def port_of(fd: int) -> int:
    """The port the listening socket ``fd`` is bound to (the descriptor stays open)."""
    sock = socket.socket(fileno=fd)
    try:
        port: int = sock.getsockname()[1]
        return port
    finally:
        sock.detach()


def listeners(port: int) -> set[int]:
    """The socket inodes listening on TCP ``port`` of any IPv4 address (``/proc/net/tcp``): who answers there."""
    found = set()
    with open("/proc/net/tcp") as table:
        for row in table.read().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                found.add(int(fields[9]))
    return found


def sole_listener(fd: int) -> bool:
    """Whether the socket ``fd`` is the one and only listener on its port (no other socket of any user's shares
    it, as ``SO_REUSEPORT`` would let one of the same user's)."""
    return listeners(port_of(fd)) == {os.fstat(fd).st_ino}


def host_store(fd: int) -> Any:
    """A TCPStore server on the listening socket ``fd`` (it owns the descriptor from here on; the caller keeps the
    store referenced while the run lasts)."""
    # heavy: only the store process pays for it; torch.distributed re-exports this class, its stubs do not say so
    from torch._C._distributed_c10d import TCPStore

    return TCPStore(LOOPBACK, port_of(fd), is_master=True, master_listen_fd=fd, wait_for_workers=False)


def verified(server: Any) -> bool:
    """Whether a client on 127.0.0.1:port (the agents' way in) reaches ``server`` itself: a random value written
    into it is read back through the port."""
    from torch._C._distributed_c10d import TCPStore

    token = secrets.token_hex(16)
    server.set(_CHECK_KEY, token)
    client = TCPStore(LOOPBACK, server.port, is_master=False, timeout=timedelta(seconds=30))
    try:
        return bytes(client.get(_CHECK_KEY)) == token.encode()
    finally:
        server.delete_key(_CHECK_KEY)
