"""GPU sizes as data, InfiniBand/EFA-aware selection, and a cost and scaling model.

Nothing here imports torch or a cloud SDK; the data is read on first use.
"""

from .model import (
    Estimate,
    StepTime,
    Workload,
    allreduce_seconds,
    estimate,
    peak_tflops,
    workload_for_model,
)
from .overheads import Overheads, overheads
from .presets import disables_rdma, nccl_env_presets
from .select import Candidate, Requirements, Selection, select, smddp_types
from .skus import (
    CATALOG_DATE,
    Sku,
    all_skus,
    azure_ib_alternative,
    azure_rdma_by_name,
    check_cloud,
    clouds,
    find,
    replacement_for,
    skus,
)
from .speed import gpu_key, speed, speed_basis

__all__ = [
    "CATALOG_DATE",
    "Candidate",
    "Estimate",
    "Overheads",
    "Requirements",
    "Selection",
    "Sku",
    "StepTime",
    "Workload",
    "all_skus",
    "allreduce_seconds",
    "azure_ib_alternative",
    "azure_rdma_by_name",
    "check_cloud",
    "clouds",
    "disables_rdma",
    "estimate",
    "find",
    "gpu_key",
    "nccl_env_presets",
    "overheads",
    "peak_tflops",
    "replacement_for",
    "select",
    "skus",
    "smddp_types",
    "speed",
    "speed_basis",
    "workload_for_model",
]
