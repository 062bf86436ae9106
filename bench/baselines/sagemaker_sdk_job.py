"""Baseline: the same smddp CIFAR-10 job built with the SageMaker Python SDK (v3 ModelTrainer), as its users do.

When the SDK (the `sagemaker` extra, ~1 GB) is not installed, falls back to what a boto3 user writes:
the CreateTrainingJob request as a dict, checked with botocore's validator. The first line of output
says which baseline ran.
"""

import json
import os
import sys

# Offline, as cloudddp renders: a region and placeholder credentials, nothing sent.
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "offline")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "offline")
os.environ.setdefault("SAGEMAKER_VALIDATE_ROLE", "false")  # the SDK would call IAM SimulatePrincipalPolicy
code_dir = sys.argv[1]
try:
    from sagemaker.core.training.configs import (
        CheckpointConfig,
        Compute,
        OutputDataConfig,
        SourceCode,
        StoppingCondition,
    )
    from sagemaker.train.distributed import Torchrun
    from sagemaker.train.model_trainer import ModelTrainer
except ImportError:
    ModelTrainer = None

IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.4-gpu-py311"
HYPER = {"dataset": "cifar10", "model": "resnet18", "epochs": "30", "batch-size": "256", "lr": "0.1"}

if ModelTrainer is not None:
    trainer = ModelTrainer(
        training_image=IMAGE,
        source_code=SourceCode(source_dir=code_dir, entry_script="train.py"),
        compute=Compute(instance_type="ml.p4d.24xlarge", instance_count=2, volume_size_in_gb=100),
        distributed=Torchrun(),
        hyperparameters=HYPER,
        role="arn:aws:iam::111122223333:role/SageMakerRole",
        stopping_condition=StoppingCondition(max_runtime_in_seconds=8 * 3600),
        checkpoint_config=CheckpointConfig(s3_uri="s3://bucket/ckpt", local_path="/opt/ml/checkpoints"),
        output_data_config=OutputDataConfig(s3_output_path="s3://bucket/output"),
        base_job_name="cifar10-smddp",
    )
    print("baseline: sagemaker ModelTrainer")
    print(trainer.model_dump_json(exclude={"sagemaker_session"}, fallback=str)[:4000])
else:
    import boto3
    from botocore.validate import ParamValidator

    client = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    request = {
        "TrainingJobName": "cifar10-smddp",
        "RoleArn": "arn:aws:iam::111122223333:role/SageMakerRole",
        "AlgorithmSpecification": {"TrainingImage": IMAGE, "TrainingInputMode": "File"},
        "HyperParameters": {
            **{k: json.dumps(v) for k, v in HYPER.items()},
            "sagemaker_program": "train.py",
            "sagemaker_submit_directory": "s3://bucket/code/sourcedir.tar.gz",
            "sagemaker_distributed_dataparallel_enabled": "true",
        },
        "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2, "VolumeSizeInGB": 100},
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/output"},
        "StoppingCondition": {"MaxRuntimeInSeconds": 8 * 3600},
        "CheckpointConfig": {"S3Uri": "s3://bucket/ckpt", "LocalPath": "/opt/ml/checkpoints"},
    }
    op = client.meta.service_model.operation_model("CreateTrainingJob")
    report = ParamValidator().validate(request, op.input_shape)
    assert not report.has_errors(), report.generate_report()
    print("baseline: boto3 request + botocore validation")
    print(json.dumps(request, indent=2))
