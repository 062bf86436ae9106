"""Baseline: the same CIFAR-10 DDP job built with the azure-ai-ml SDK and dumped to YAML, as its users do.

Run as a whole process (import + build + dump), like `cloudddp render ... --backend azureml`.
"""

import sys
import tempfile
from pathlib import Path

from azure.ai.ml import Input, command
from azure.ai.ml.entities import AmlCompute

code_dir = Path(sys.argv[1])
node = command(
    name="cifar10-ddp",
    display_name="cifar10-ddp",
    code=str(code_dir),
    command=(
        "python train.py --dataset cifar10 --model resnet18 --epochs 30 --batch-size 256 --lr 0.1 "
        "--data-dir ${{inputs.cifar}}"
    ),
    inputs={"cifar": Input(type="uri_folder", path="azureml://datastores/workspaceblobstore/paths/cifar10/")},
    environment="azureml://registries/azureml/environments/acpt-pytorch-2.8-cuda12.6/versions/14",
    compute="gpu-cluster",
    instance_count=2,
    distribution={"type": "pytorch", "process_count_per_instance": 8},
    shm_size="16g",
    environment_variables={"CLOUDDDP_DIST_BACKEND": "nccl"},
    timeout=8 * 3600,
)
cluster = AmlCompute(
    name="gpu-cluster",
    size="Standard_ND96asr_v4",
    min_instances=0,
    max_instances=4,
    idle_time_before_scale_down=300,
    tier="dedicated",
    ssh_public_access_enabled=False,
)
with tempfile.TemporaryDirectory() as tmp:
    node._to_job().dump(Path(tmp) / "job.yml")
    cluster.dump(Path(tmp) / "compute.yml")
    sys.stdout.write((Path(tmp) / "job.yml").read_text() + (Path(tmp) / "compute.yml").read_text())
