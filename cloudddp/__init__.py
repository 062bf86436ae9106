"""cloudddp: run PyTorch DistributedDataParallel training anywhere from one declarative job spec.

``import cloudddp`` is cheap: the API is imported on first use, and no cloud SDK or torch is imported
until a backend talks to its cloud or a job trains.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from cloudddp.api import Job, Run
    from cloudddp.backends.base import RunState, RunStatus
    from cloudddp.plan import Plan

_LAZY = {"Job": "api", "Run": "api", "Plan": "plan", "RunState": "backends.base", "RunStatus": "backends.base"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'cloudddp' has no attribute {name!r}")


def load(path: str, overrides: list[str] | None = None) -> Job:
    """Read a job spec: ``cloudddp.load("job.yaml", ["resources.nodes=2"])``."""
    job: type[Job] = __getattr__("Job")  # the API module, imported on first use like the names above
    return job.load(path, overrides or [])


__all__ = ["Job", "Plan", "Run", "RunState", "RunStatus", "__version__", "load"]
