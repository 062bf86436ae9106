"""A spot job on a size that takes no low-priority nodes (``lowPriorityCapable: false`` in the region's size list,
as for B-series) is refused at preflight, saying why, before anything is sent; one on a size that does passes."""

from __future__ import annotations

import pytest

from cloudddp.backends.checks import PreflightFailed
from cloudddp.backends.plugins import load_spec
from tests.support.azure_rig import WorkspaceModel, rig_backend
from tests.support.cli import ROOT

pytestmark = pytest.mark.slow

CPU_JOB = [
    "resources.nodes=1",
    "resources.gpus_per_node=0",
    "resources.accelerator=null",
    "distribution.backend=gloo",
    "azureml.compute=cpu-spot",
]


def spot_job(size: str) -> object:
    return load_spec(
        ROOT / "jobs" / "cifar10-azureml.yaml", [*CPU_JOB, f"azureml.vm_size={size}", "resources.spot=true"]
    )


def test_a_spot_job_on_a_size_without_low_priority_is_refused_at_preflight(model: WorkspaceModel) -> None:
    backend = rig_backend(model, token="lp1")
    plan = backend.render(spot_job("Standard_B2s"))
    checks = {c.name: c for c in backend.preflight(plan)}
    refused = checks["Standard_B2s takes spot nodes in eastus"]
    assert refused.ok is False and "lowPriorityCapable is false" in refused.detail and "resources.spot" in refused.fix
    with pytest.raises(PreflightFailed) as stopped:
        backend.launch(plan)
    assert stopped.value.exit_code == 2 and "does not take low-priority (spot) nodes" in str(stopped.value)
    assert not model.jobs and "cpu-spot" not in model.computes  # nothing was sent


def test_a_spot_job_on_a_size_with_low_priority_passes_that_check(model: WorkspaceModel) -> None:
    backend = rig_backend(model, token="lp2")
    checks = {c.name: c for c in backend.preflight(backend.render(spot_job("Standard_D4s_v3")))}
    assert checks["Standard_D4s_v3 takes spot nodes in eastus"].ok is True
