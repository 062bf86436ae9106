"""``cloudddp init``: a project that runs as written: a commented job spec with either a small DDP script of your
own to edit (``train.py``) or a copy of the shared training script (``--with-script``).

The spec gets a ``checkpoint.key`` drawn at random: the checkpoint folder is keyed on the job's name, its program
and that key, so two projects made by ``init`` never share a folder, even with the same name in different places,
while a clone of one project (the key is in its job.yaml) finds its own checkpoints on every machine."""

from __future__ import annotations

import json
import secrets
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
  args: {args}

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
  collective_timeout: 10m       # the script's collectives wait this long for a missing rank
                                # (CLOUDDDP_COLLECTIVE_TIMEOUT: pass it to init_process_group)

# env:
#   NCCL_DEBUG: WARN
#   WANDB_API_KEY: {{from_env: WANDB_API_KEY, secret: true}}   # never printed or stored

checkpoint:
  key: {key}          # this project's own checkpoint folder: another project, even of the same
                                # name, never resumes it; a new key (or resume: never) starts from scratch
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
#   framework_version: "2.13"  # the official PyTorch image; left out: the newest AWS still patches

# azureml:
#   subscription_id: <subscription>
#   resource_group: <resource group>
#   workspace: <workspace>      # or a config.json from the portal
#   compute: gpu-cluster        # created when missing (autoscales from 0)
#   vm_size: Standard_NC24ads_A100_v4
"""


SHARED_ARGS = '[--dataset, digits, --model, cnn, --epochs, "10"]'
OWN_ARGS = '[--epochs, "3"]'


def own_script_template() -> Path:
    """The small DDP script plain ``init`` writes (packaged with cloudddp, so it works from a wheel too)."""
    return Path(__file__).resolve().parents[1] / "data" / "train_template.py"


def shared_script_dir() -> Path:
    """The shared training script next to the package (source checkouts and editable installs)."""
    path = Path(__file__).resolve().parents[2] / "src_train"
    if not (path / "train.py").is_file():
        raise UserError(
            "the shared training script (src_train/) ships with the cloudddp source repository, "
            "not inside the wheel; clone the repository to copy it"
        )
    return path


def init(path: Path, *, schema: dict[str, Any], name: str | None, with_script: bool, force: bool) -> list[str]:
    """Write the job spec at ``path`` (a folder gets ``job.yaml``), ``schema`` (the caller's JSON Schema of job
    files: the spec does not know the registered backends' sections) next to it as ``job.schema.json``, and the
    code it runs. Returns what was done, a line each. A ``train.py`` already in the folder is the user's: it is
    kept, and the spec runs it."""
    path = path if path.suffix in (".yaml", ".yml") else path / "job.yaml"
    folder = path.parent
    script, shared = folder / "train.py", folder / "src_train"
    for target in (path, shared) if with_script else (path,):
        if target.exists() and not force:
            raise UserError(f"{target} exists; pass --force to overwrite it")
    folder.mkdir(parents=True, exist_ok=True)
    job_name = name or (folder.resolve().name if path.stem == "job" else path.stem)
    job_name = "".join(c if c.isalnum() or c == "-" else "-" for c in job_name).strip("-")[:63] or "my-job"
    schema_path = folder / "job.schema.json"
    schema_path.write_text(json.dumps(schema, indent=2) + "\n")
    done = [f"wrote {path}", f"wrote {schema_path}"]
    if with_script:
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(shared_script_dir(), shared, dirs_exist_ok=True, ignore=ignore)
        user = shared / "ddptrain" / "user.py"
        done.append(f"wrote {shared} (the shared training script; your model and data go in {user})")
    elif script.exists() and not force:
        done.append(f"kept {script}: the spec runs it (check code.args)")
    else:
        shutil.copyfile(own_script_template(), script)
        done.append(f"wrote {script} (a small DDP script: replace its model and data)")
    code_dir, args = ("src_train", SHARED_ARGS) if with_script else (".", OWN_ARGS)
    key = f"project-{secrets.token_hex(4)}"  # drawn once: the project's checkpoints, wherever it is cloned
    text = TEMPLATE.format(
        schema=schema_path.name, file=path.name, name=job_name, code_dir=code_dir, args=args, key=key
    )
    path.write_text(text)
    return done
