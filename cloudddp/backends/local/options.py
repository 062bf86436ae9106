"""The ``local:`` section of a job spec."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from cloudddp.spec.model import Strict


class LocalOptions(Strict):
    """Only the local backend reads this."""

    processes_per_node: int | None = Field(
        None,
        ge=1,
        le=64,
        description="Processes per node here; default: resources.processes_per_node, else GPUs per node, else 2.",
    )
    nodes: int = Field(1, ge=1, le=8, description="torchrun 'nodes' started on this machine (multi-node path).")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="auto: CUDA when the job asks for GPUs and this machine has a CUDA device, else the CPU; cpu or "
        "cuda: that one.",
    )
