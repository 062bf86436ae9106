"""GPU sizes as data, InfiniBand/EFA-aware selection, and a cost and scaling model.

Owns the dated size catalog (:mod:`~cloudddp.catalog.skus`), selection (:mod:`~cloudddp.catalog.select`), the
cost and scaling model (:mod:`~cloudddp.catalog.model`, :mod:`~cloudddp.catalog.speed`,
:mod:`~cloudddp.catalog.overheads`), sizing a job spec (:mod:`~cloudddp.catalog.sizing`), the ranking a recovery
moves along (:mod:`~cloudddp.catalog.ranking`), step times measured on finished runs
(:mod:`~cloudddp.catalog.stepstore`), a run's bill as backends report it (:mod:`~cloudddp.catalog.bill`), where a
backend's sizes come from (:mod:`~cloudddp.catalog.target`, the one catalog type the backend contract names), NCCL
and EFA presets per interconnect (:mod:`~cloudddp.catalog.presets`) and the catalog's check of its own rows
(:mod:`~cloudddp.catalog.lint`).

May import: ``spec``, ``observe`` (metric records), ``plan`` (the typed estimate), ``paths`` and ``errors``.
Nothing here imports torch or a cloud SDK; the data is read on first use.
"""

from cloudddp.catalog.model import (
    StepTime,
    Workload,
    allreduce_seconds,
    estimate,
    peak_tflops,
    workload_for_model,
)
from cloudddp.catalog.overheads import Overheads, overheads
from cloudddp.catalog.presets import disables_rdma, nccl_env_presets
from cloudddp.catalog.select import Candidate, Requirements, Selection, select, smddp_types
from cloudddp.catalog.skus import (
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
from cloudddp.catalog.speed import gpu_key, speed, speed_basis

__all__ = [
    "CATALOG_DATE",
    "Candidate",
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
