"""The ``sagemaker:`` section of a job spec."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, field_validator

from cloudddp.backends.sagemaker.limits import instance_type_problem
from cloudddp.spec.model import Duration, Strict, empty_list


class SageMakerOptions(Strict):
    """Only the SageMaker backend reads this."""

    env_fallbacks: ClassVar[dict[str, tuple[str, ...]]] = {
        "region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
        "role": ("CLOUDDDP_SAGEMAKER_ROLE",),
    }

    region: str | None = Field(None, description="The AWS region the job runs in.")
    role: str | None = Field(None, description="IAM role ARN the training job runs as.")
    bucket: str | None = Field(None, description="S3 bucket for code, data, checkpoints and outputs.")
    prefix: str = Field(
        "cloudddp", description="Key prefix in the bucket: code, data, checkpoints and outputs go under it."
    )
    instance_type: str | None = Field(None, description="e.g. ml.p4d.24xlarge; default: chosen from resources.")
    image: str | None = Field(None, description="Training image URI; default: the official PyTorch DLC.")
    framework_version: str | None = Field(
        None,
        description="PyTorch version of the official image, e.g. 2.13 or 2.5.1; default: the newest AWS still "
        "patches (for smddp: the newest whose image has the library).",
    )
    py_version: str | None = Field(
        None, description="Python of the official image, e.g. py311; default: the one AWS builds for framework_version."
    )
    volume_gb: int | None = Field(
        None,
        ge=1,
        le=16384,
        description="Each instance's storage volume, GB (VolumeSizeInGB); default: resources.disk_gb. No effect on "
        "types with local NVMe storage.",
    )
    keep_alive: int = Field(0, ge=0, le=3600, description="Warm-pool keep-alive seconds.")
    max_wait: Duration | None = Field(None, description="Spot: longest wait for capacity plus runtime.")
    subnets: list[str] = Field(default_factory=empty_list, description="The job's VPC subnets (VpcConfig).")
    security_group_ids: list[str] = Field(
        default_factory=empty_list, description="The job's security groups in that VPC (VpcConfig)."
    )
    network_isolation: bool = Field(
        False,
        description="No network from the container (EnableNetworkIsolation): requirements must then install without "
        "an index (vendored wheels, --no-index).",
    )
    encrypt_inter_container_traffic: bool = Field(
        False, description="Encrypt the traffic between the job's instances (EnableInterContainerTrafficEncryption)."
    )
    volume_kms_key: str | None = Field(
        None, description="KMS key of the instances' volumes; refused on types with local NVMe storage."
    )
    output_kms_key: str | None = Field(
        None, description="KMS key of the job's outputs and of cloudddp's uploads (SSE-KMS)."
    )
    tags: dict[str, str] = Field(
        default_factory=dict, description="Tags of the training job, beside the spec's own `tags`."
    )

    @field_validator("instance_type")
    @classmethod
    def _a_training_instance_type(cls, value: str | None) -> str | None:
        problem = instance_type_problem(value) if value else None
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("framework_version", mode="before")
    @classmethod
    def _quoted_version(cls, v: Any) -> Any:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            raise ValueError('write the version in quotes, e.g. "2.10": YAML reads an unquoted 2.10 as the number 2.1')
        return v
