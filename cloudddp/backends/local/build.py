"""The local request and its ``torchrun.sh``, made from the render's :class:`LocalDecision` alone."""

from __future__ import annotations

from cloudddp.backends import torchrun
from cloudddp.backends.local.decide import CODE_DIR, PORT, RUN_DIR, LocalDecision
from cloudddp.backends.local.rendezvous import LOOPBACK
from cloudddp.backends.local.request import LocalRequest, NodeCommand
from cloudddp.backends.local.script import shell_script

RANK_TAG = "[rank${rank}]:"
"""torchrun's prefix of each worker's lines (``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE``): the global rank, which
torchrun alone knows (the rendezvous decides which node holds rank 0)."""


def request(d: LocalDecision) -> LocalRequest:
    """What launch and the supervisor do: one torchrun agent per node, in the unpacked snapshot."""
    return LocalRequest(
        cwd=CODE_DIR,
        device=d.device,
        nnodes=d.nodes,
        nproc_per_node=d.processes_per_node,
        max_runtime=d.max_runtime,
        stall_timeout=d.stall_seconds,
        rendezvous_port=PORT,
        env=d.env,
        nodes=tuple(_node(d, node) for node in range(d.nodes)),
        requirements=d.requirements.lines if d.requirements else (),
        own_script=d.own_script,
        keep_files=d.keep_files,
        arguments=d.arguments,
    )


AGENT = (
    torchrun.EACH_ROUND_ANEW
    + """import socket, sys
import torch.distributed as dist
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler
from torch.distributed.run import main
def on_loopback(self, addr, port):
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen(512)
    return dist.TCPStore("127.0.0.1", sock.getsockname()[1], is_master=True, multi_tenant=True,
                         master_listen_fd=sock.detach())
DynamicRendezvousHandler._create_tcp_store_server = on_loopback
sys.exit(main())
"""
)
"""torchrun's agent, with the store it makes for its workers (``MASTER_PORT``, anew for each attempt:
:data:`~cloudddp.backends.torchrun.EACH_ROUND_ANEW`) on a socket bound to 127.0.0.1: torchrun binds it to
every interface (TCPStore has no bind address; it takes a listening socket, as the rendezvous store does). Every
local "node" is on this machine, so its workers reach it there (``--local-addr 127.0.0.1`` makes that their
``MASTER_ADDR``). Run with ``-c``: the job's Python may not have cloudddp."""


def _node(d: LocalDecision, node: int) -> NodeCommand:
    argv = (
        d.python,
        "-c",
        AGENT,
        "--local-addr",
        LOOPBACK,
        "--nnodes",
        str(d.nodes),
        "--nproc-per-node",
        str(d.processes_per_node),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"{LOOPBACK}:{PORT}",
        # no --rdzv-id: the supervisor passes a random one in PET_RDZV_ID, never in argv
        "--rdzv-conf",
        "is_host=0",  # the supervisor hosts the store, on loopback only
        "--max-restarts",
        str(d.max_restarts),
        "--log-dir",
        f"{RUN_DIR}/ranks/node{node}",
        "--tee",
        "3",
        *d.program,
    )
    env = {
        "NODE_RANK": str(node),
        "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": RANK_TAG,
        # gloo's own connections between the ranks on loopback too (the job's env may name another interface)
        **({} if "GLOO_SOCKET_IFNAME" in d.env else {"GLOO_SOCKET_IFNAME": "lo"}),
    }
    return NodeCommand(node_rank=node, argv=argv, env=env)


def documents(d: LocalDecision, request: LocalRequest) -> dict[str, str]:
    return {"torchrun.sh": shell_script(request, d.snapshot.path)}


def late_names(d: LocalDecision) -> tuple[str, ...]:
    """The values launch binds: the run folder, the store's port, the run id, and the Python that has the job's
    requirements where it has some."""
    return ("RUN_DIR", "PORT", "RUN_ID", *(["PYTHON"] if d.requirements else []))
