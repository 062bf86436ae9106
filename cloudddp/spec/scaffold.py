"""``cloudddp init``: a commented job spec to start from, and optionally the shared training script."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from cloudddp.errors import UserError

TEMPLATE = """\
# yaml-language-server: $schema={schema}
# A cloudddp job spec. Validate:  cloudddp validate {file}
# Run here:   cloudddp submit {file}          (torchrun on this machine)
# In a cloud: cloudddp submit {file} -b sagemaker | -b azureml   (add --dry-run to see the request)
name: {name}                    # letters, digits and '-'

code:
  dir: {code_dir}                 # packaged with every job (.gitignore/.amlignore/.cloudddpignore respected)
  entry: train.py               # started once per process by torchrun / Azure ML / SageMaker
  args: [--dataset, digits, --model, cnn, --epochs, "10"]

# inputs:                       # data, mounted or downloaded where the job runs
#   train:
#     path: ./data              # a local folder (uploaded) or a URI
#     sagemaker: s3://my-bucket/data/
#     azureml: azureml://datastores/workspaceblobstore/paths/data/
#     arg: --data-dir           # the script receives --data-dir <where the data is>

resources:
  nodes: 1                      # machines
  gpus_per_node: 0              # one process per GPU; 0 = CPU training
  # accelerator: A100           # GPU model the size must have
  # min_gpu_memory_gb: 40
  # interconnect: auto          # auto: InfiniBand/EFA required when nodes > 1
  # spot: false                 # spot (AWS) / low priority (Azure)

distribution:
  backend: auto                 # auto | nccl | gloo | smddp (SageMaker only)
  launcher: torchrun            # torchrun | mpi
  collective_timeout: 10m       # a stuck rank fails the job after this

# env:
#   NCCL_DEBUG: WARN
#   WANDB_API_KEY: {{from_env: WANDB_API_KEY, secret: true}}   # never printed or stored

checkpoint:
  every_epochs: 1               # rank 0 writes atomically; restarts resume from the newest
  resume: auto

limits:
  max_runtime: 2h
  max_restarts: 0

local:
  processes_per_node: 2         # processes on this machine (CPU) for `-b local`

# sagemaker:
#   region: us-east-1
#   role: arn:aws:iam::<account>:role/<SageMakerRole>
#   bucket: <bucket>
#   instance_type: ml.g5.xlarge # or leave it out: cloudddp picks one (see `cloudddp plan`)
#   image: 763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.4-gpu-py311

# azureml:
#   subscription_id: <subscription>
#   resource_group: <resource group>
#   workspace: <workspace>      # or a config.json from the portal
#   compute: gpu-cluster        # created when missing (autoscales from 0)
#   vm_size: Standard_NC24ads_A100_v4
"""


def shared_script_dir() -> Path:
    """The shared training script next to the package (source checkouts and editable installs)."""
    path = Path(__file__).resolve().parents[2] / "src_train"
    if not (path / "train.py").is_file():
        raise UserError(
            "the shared training script (src_train/) ships with the cloudddp source repository, "
            "not inside the wheel; clone the repository to copy it"
        )
    return path


def init(path: Path, *, schema: dict[str, Any], name: str | None, with_script: bool, force: bool) -> list[Path]:
    """Write the job spec at ``path`` (a folder gets ``job.yaml``) and ``schema``, the JSON Schema of job files
    (the caller's: the spec does not know the registered backends' sections), next to it as ``job.schema.json``."""
    path = path if path.suffix in (".yaml", ".yml") else path / "job.yaml"
    if path.exists() and not force:
        raise UserError(f"{path} exists; pass --force to overwrite it")
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    job_name = name or (folder.resolve().name if path.stem == "job" else path.stem)
    job_name = "".join(c if c.isalnum() or c == "-" else "-" for c in job_name).strip("-")[:63] or "my-job"
    written = [path]
    schema_path = folder / "job.schema.json"
    schema_path.write_text(json.dumps(schema, indent=2) + "\n")
    written.append(schema_path)
    code_dir = "src_train" if with_script else "."
    if with_script:
        target = folder / "src_train"
        if target.exists() and not force:
            raise UserError(f"{target} exists; pass --force to overwrite it")
        shutil.copytree(
            shared_script_dir(), target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
        written.append(target)
    path.write_text(TEMPLATE.format(schema=schema_path.name, file=path.name, name=job_name, code_dir=code_dir))
    return written
