"""The SageMaker test suites' jobs: the smddp example, and the overrides that put it on an EBS-only CPU type
(which takes a volume KMS key, where local-NVMe types refuse one)."""

from __future__ import annotations

from tests.support.cli import ROOT

SMDDP_JOB = ROOT / "jobs" / "cifar10-smddp.yaml"
EBS_CPU_JOB = [
    "distribution.backend=gloo",
    "resources.gpus_per_node=0",
    "resources.accelerator=null",
    "resources.interconnect=any",
    "sagemaker.instance_type=ml.m5.4xlarge",
    "sagemaker.image=763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.4-cpu-py311",
]
