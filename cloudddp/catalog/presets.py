"""NCCL / EFA environment presets per interconnect, and variables that silently turn RDMA off.

Sources (cloudddp/data/SOURCES.md): Azure azhpc-images NDv4 NCCL test and the ACPT guide
(NCCL_IB_PCI_RELAXED_ORDERING, NCCL_SOCKET_IFNAME=eth0, CUDA_DEVICE_ORDER); AWS awsome-distributed-training
efa-cheatsheet (FI_PROVIDER=efa, FI_EFA_USE_HUGE_PAGE=0, FI_EFA_USE_DEVICE_RDMA=1 harmless on p4/p5).

``NCCL_TOPO_FILE`` is not set on Azure: azhpc-images writes ``/opt/microsoft/ndv4-topo.xml`` (and ndv5) onto the
host VM image, not into the containers Azure ML jobs run in, so the path would name a file the job does not
have (NCCL warns and ignores it). A job whose image has a topology file sets ``env.NCCL_TOPO_FILE`` itself.
"""

from __future__ import annotations

from cloudddp.catalog.skus import Sku


def nccl_env_presets(sku: Sku) -> dict[str, str]:
    """Variables a multi-node job on this size should carry (the user's own values win)."""
    if sku.fabric == "infiniband" and sku.cloud == "azure":
        return {"NCCL_IB_PCI_RELAXED_ORDERING": "1", "NCCL_SOCKET_IFNAME": "eth0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if sku.fabric == "efa":
        env = {"FI_PROVIDER": "efa", "FI_EFA_USE_HUGE_PAGE": "0"}
        if sku.rdma:
            env["FI_EFA_USE_DEVICE_RDMA"] = "1"
        return env
    return {}


def disables_rdma(env: dict[str, str]) -> list[str]:
    """The variables in ``env`` that make NCCL skip InfiniBand/EFA and fall back to TCP sockets."""
    found = []
    if env.get("NCCL_IB_DISABLE", "").strip() in ("1", "true", "True"):
        found.append("NCCL_IB_DISABLE=1 turns InfiniBand off for NCCL")
    if env.get("NCCL_NET", "").strip().lower() == "socket":
        found.append("NCCL_NET=Socket forces TCP sockets instead of IB/EFA")
    if env.get("FI_PROVIDER", "").strip().lower() in ("tcp", "sockets"):
        found.append(f"FI_PROVIDER={env['FI_PROVIDER']} makes libfabric skip EFA")
    return found
