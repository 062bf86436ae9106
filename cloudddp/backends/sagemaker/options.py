"""The ``sagemaker:`` section of a job spec."""

from __future__ import annotations

from pydantic import Field

from ...spec import Duration, Strict


class SageMakerOptions(Strict):
    """Only the SageMaker backend reads this."""

    region: str | None = None
    role: str | None = Field(None, description="IAM role ARN the training job runs as.")
    bucket: str | None = Field(None, description="S3 bucket for code, data, checkpoints and outputs.")
    prefix: str = "cloudddp"
    instance_type: str | None = Field(None, description="e.g. ml.p4d.24xlarge; default: chosen from resources.")
    image: str | None = Field(None, description="Training image URI; default: the official PyTorch DLC.")
    framework_version: str = "2.4"
    py_version: str = "py311"
    volume_gb: int | None = Field(None, ge=1, le=16384)
    keep_alive: int = Field(0, ge=0, le=3600, description="Warm-pool keep-alive seconds.")
    max_wait: Duration | None = Field(None, description="Spot: longest wait for capacity plus runtime.")
    subnets: list[str] = Field(default_factory=list)
    security_group_ids: list[str] = Field(default_factory=list)
    network_isolation: bool = False
    encrypt_inter_container_traffic: bool = False
    volume_kms_key: str | None = None
    output_kms_key: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
