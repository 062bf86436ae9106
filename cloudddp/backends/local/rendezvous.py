"""The local run's rendezvous: a store only this machine can reach, joined by an id only the job knows.

torchrun's c10d host binds its TCPStore to every interface (TCPStore has no bind address) and the agents
unpickle the rendezvous state they read from it under ``torch.rendezvous.<rdzv id>``; with the id in argv
(``ps``) anyone who reaches the port can write that state and run code as the job's user. So here no agent
hosts the store (``--rdzv-conf is_host=0`` on every node): the supervisor binds a socket to 127.0.0.1 and
hands it to a TCPStore server (``master_listen_fd``), and the id is 128 random bits the supervisor makes
and passes in ``PET_RDZV_ID`` (torchrun reads it when ``--rdzv-id`` is absent). A process's environment is
readable by its own user only; its argv by everyone.

``python -m cloudddp.backends.local.store PORT`` hosts the store until it is stopped: the supervisor starts it as a
process of its own (so the nodes go on when the supervisor is lost), and so does the plan's hand-run script.
"""

from __future__ import annotations

import secrets
import socket
from typing import Any

LOOPBACK = "127.0.0.1"
ID_VARIABLE = "PET_RDZV_ID"


def new_rdzv_id() -> str:
    """128 random bits, hex: a rendezvous nobody outside the job can name."""
    return secrets.token_hex(16)


def host_store(port: int) -> Any:
    """A TCPStore server listening on 127.0.0.1:``port`` only (the caller keeps it referenced while the run lasts)."""
    # heavy: only the supervisor pays for it; torch.distributed re-exports this class, its stubs do not say so
    from torch._C._distributed_c10d import TCPStore

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((LOOPBACK, port))
    sock.listen(512)
    # The store owns the descriptor from here on.
    return TCPStore(LOOPBACK, port, is_master=True, master_listen_fd=sock.detach(), wait_for_workers=False)
