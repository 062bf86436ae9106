"""NCCL / EFA environment presets per interconnect, and variables that silently turn RDMA off.

Sources (cloudddp/data/SOURCES.md): Azure azhpc-images NDv4 NCCL test (NCCL_IB_PCI_RELAXED_ORDERING,
NCCL_SOCKET_IFNAME=eth0, CUDA_DEVICE_ORDER, NCCL_TOPO_FILE on ND v4/v5 images); AWS
awsome-distributed-training efa-cheatsheet (FI_PROVIDER=efa, FI_EFA_USE_HUGE_PAGE=0,
FI_EFA_USE_DEVICE_RDMA=1 harmless on p4/p5).
"""

from __future__ import annotations

from cloudddp.catalog.skus import Sku

_AZURE_TOPO = {
    "Standard_ND96asr_v4": "/opt/microsoft/ndv4-topo.xml",
    "Standard_ND96amsr_A100_v4": "/opt/microsoft/ndv4-topo.xml",
    "Standard_ND96isr_H100_v5": "/opt/microsoft/ndv5-topo.xml",
}


def nccl_env_presets(sku: Sku) -> dict[str, str]:
    """Variables a multi-node job on this size should carry (the user's own values win)."""
    if sku.fabric == "infiniband" and sku.cloud == "azure":
        env = {"NCCL_IB_PCI_RELAXED_ORDERING": "1", "NCCL_SOCKET_IFNAME": "eth0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        if sku.size in _AZURE_TOPO:
            env["NCCL_TOPO_FILE"] = _AZURE_TOPO[sku.size]
        return env
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
