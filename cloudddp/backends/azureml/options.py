"""The ``azureml:`` section of a job spec."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...spec import Strict


class AzureMLOptions(Strict):
    """Only the Azure ML backend reads this."""

    subscription_id: str | None = None
    resource_group: str | None = None
    workspace: str | None = None
    compute: str | None = Field(None, description="AmlCompute cluster name; created when missing.")
    vm_size: str | None = Field(None, description="e.g. Standard_ND96asr_v4; default: chosen from resources.")
    min_nodes: int = Field(0, ge=0)
    max_nodes: int | None = Field(None, ge=1, description="Cluster maximum; default: the job's node count.")
    idle_time_before_scale_down: int = Field(300, ge=0)
    environment: str = Field(
        "azureml:AzureML-acpt-pytorch-2.2-cuda12.1@latest",
        description="Curated environment reference or a docker image URI.",
    )
    shm_size: str = "16g"
    experiment_name: str | None = None
    job_tier: Literal["spot", "basic", "standard", "premium"] | None = None
