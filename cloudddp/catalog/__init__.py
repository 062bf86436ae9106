"""GPU sizes as data, InfiniBand/EFA-aware selection, and a cost and scaling model.

Nothing here imports torch or a cloud SDK; the data is read on first use.
"""

from .model import Estimate, Workload, allreduce_seconds, estimate, peak_tflops, workload_for_model
from .presets import disables_rdma, nccl_env_presets
from .select import Candidate, Requirements, Selection, select, smddp_types
from .skus import CATALOG_DATE, Sku, all_skus, azure_ib_alternative, azure_rdma_by_name, find, skus

__all__ = [
    "CATALOG_DATE", "Candidate", "Estimate", "Requirements", "Selection", "Sku", "Workload", "all_skus",
    "allreduce_seconds", "azure_ib_alternative", "azure_rdma_by_name", "disables_rdma", "estimate", "find",
    "nccl_env_presets", "peak_tflops", "select", "skus", "smddp_types", "workload_for_model",
]
