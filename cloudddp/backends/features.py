"""What a job asks of a backend, and what a backend declares it cannot do (each with its reason).

Render checks the features a spec uses against the backend's declared capabilities in one place
(:meth:`cloudddp.backends.base.Backend.render`), so an unsupported feature is never silently dropped:
it is an error with the backend's reason, or, for a caveat, a warning on the plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from cloudddp.spec.model import JobSpec


class Feature(str, Enum):
    SMDDP = "smddp"
    MPI = "mpi launcher"
    SPOT = "spot capacity"
    MULTI_NODE = "multi-node"
    GPUS = "GPUs"
    REMOTE_INPUTS = "remote inputs"
    LOCAL_INPUTS = "local inputs"
    CODE_COMMAND = "code.command"
    MAX_RESTARTS = "restarts"
    SECRET_ENV = "secret env"
    PROVISION = "provisioning"
    CANCEL = "cancel"
    FOLLOW_LOGS = "follow logs"


@dataclass(frozen=True)
class Capabilities:
    """``unsupported``: render refuses a spec using one, with the reason; ``caveats``: a warning instead."""

    unsupported: Mapping[Feature, str] = field(default_factory=dict)
    caveats: Mapping[Feature, str] = field(default_factory=dict)

    def supports(self, feature: Feature) -> bool:
        return feature not in self.unsupported

    def to_dict(self) -> dict[str, Any]:
        return {
            "supports": [f.value for f in Feature if self.supports(f)],
            "unsupported": {f.value: why for f, why in self.unsupported.items()},
            "caveats": {f.value: why for f, why in self.caveats.items()},
        }


def features_used(spec: JobSpec, backend: str) -> set[Feature]:
    """The features ``spec`` needs from ``backend`` (input locations depend on the backend)."""
    used: set[Feature] = set()
    dist, res = spec.distribution, spec.resources
    if dist.backend == "smddp":
        used.add(Feature.SMDDP)
    if dist.launcher == "mpi":
        used.add(Feature.MPI)
    if res.spot:
        used.add(Feature.SPOT)
    if res.nodes > 1:
        used.add(Feature.MULTI_NODE)
    if res.gpus_per_node:
        used.add(Feature.GPUS)
    for name in spec.inputs:
        where = spec.input_location(name, backend)
        used.add(Feature.REMOTE_INPUTS if "://" in where else Feature.LOCAL_INPUTS)
    if spec.code.command is not None:
        used.add(Feature.CODE_COMMAND)
    if spec.limits.max_restarts:
        used.add(Feature.MAX_RESTARTS)
    if any(entry.secret for entry in spec.env.values()):
        used.add(Feature.SECRET_ENV)
    return used
