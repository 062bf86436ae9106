"""The torch.distributed variables of a process an MPI launcher started, from what Open MPI set.

Shipped in every code snapshot as ``_cloudddp_mpi.py``; the rank launcher (:mod:`cloudddp.injob.shim`) loads it from
beside itself when it runs under ``mpirun`` (Azure ML's MPI distribution, SageMaker's MPI runner, smddp), so every
program sees the same runtime contract as under torchrun. Standard library only: it runs in stock images.
"""

from __future__ import annotations

import json

SHIPPED_AS = "_cloudddp_mpi.py"
MPI_PORT = "29500"
"""The rendezvous port when an MPI launcher names only the head node (torch's own default)."""


def mpi_environment(env: dict[str, str]) -> dict[str, str]:
    """The torch.distributed variables (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
    ``MASTER_ADDR``, ``MASTER_PORT``) for a process an MPI launcher started, from what it set (Open MPI's
    ``OMPI_COMM_WORLD_*``; for the head node Azure ML's ``AZ_BATCH_MASTER_NODE`` (``addr:port``, set on more than
    one node) or ``AZ_BATCHAI_MPI_MASTER_NODE``, or the first of SageMaker's ``SM_HOSTS``, which its MPI runner
    passes to every rank), so a script's ``init_process_group("env://")`` works unchanged. What is set already is
    kept; nothing without MPI."""
    if "OMPI_COMM_WORLD_RANK" not in env:
        return {}
    head, _, port = (env.get("AZ_BATCH_MASTER_NODE") or "").partition(":")
    addr = head or env.get("AZ_BATCHAI_MPI_MASTER_NODE") or _first_host(env.get("SM_HOSTS"))
    derived = {
        "RANK": env["OMPI_COMM_WORLD_RANK"],
        "WORLD_SIZE": env.get("OMPI_COMM_WORLD_SIZE", "1"),
        "LOCAL_RANK": env.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
        "LOCAL_WORLD_SIZE": env.get("OMPI_COMM_WORLD_LOCAL_SIZE", "1"),
        "MASTER_ADDR": addr or "127.0.0.1",
        "MASTER_PORT": port or MPI_PORT,
    }
    return {name: value for name, value in derived.items() if name not in env}


def _first_host(hosts: str | None) -> str | None:
    """The first of SageMaker's hosts (``SM_HOSTS``, a JSON list, sorted: the toolkit's master), if any."""
    try:
        found = json.loads(hosts or "[]")
    except ValueError:
        return None
    return str(found[0]) if isinstance(found, list) and found else None
