"""The CreateTrainingJob request for a spec: pure, offline, and exactly what ``launch`` sends.

The SageMaker PyTorch containers run the SageMaker training toolkit, which starts the entry script
from these hyperparameters: ``sagemaker_program`` and ``sagemaker_submit_directory`` (the code
archive), plus ``sagemaker_torch_distributed_enabled`` (torchrun on every node) or
``sagemaker_distributed_dataparallel_enabled`` (smddp under MPI). Every other hyperparameter reaches
the script as ``--key value``; cloudddp's launcher (``_cloudddp_launch.py``) is that script, and it runs
the job's program with the exact argv carried in its ``cloudddp-NN`` hyperparameters.

What starts the container is cloudddp's own (``ContainerEntrypoint``, as the SDK v3's ModelTrainer does):
the launcher in ``--init`` mode is PID 1, runs the image's own entry (``bash -m
start_with_right_hostname.sh train``, which runs the toolkit) as its child and passes a stop's SIGTERM
on to every process. The image's own PID 1 forwards no signal.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from cloudddp.backends.sagemaker.efa import plugin_picks_protocol, sagemaker_efa
from cloudddp.backends.sagemaker.images import training_image
from cloudddp.backends.sagemaker.limits import LIMITS, check_instance_type
from cloudddp.backends.sagemaker.limits import check as check_limits
from cloudddp.backends.sagemaker.options import SageMakerOptions
from cloudddp.backends.sagemaker.volumes import check_isolation, check_volume
from cloudddp.catalog import nccl_env_presets
from cloudddp.catalog.sizing import decide
from cloudddp.catalog.target import SizeTarget
from cloudddp.code import requirements
from cloudddp.code.shim import RANK_TAG, SHIPPED_AS
from cloudddp.code.snapshot import collect, folder_digest, snapshot_warnings
from cloudddp.errors import UserError
from cloudddp.observe.metrics import STANDARD_METRICS, metric_regex
from cloudddp.plan import EnvSource, late, substitute
from cloudddp.runtime import RUN_ID, Places, checkpoint_folder, code_snapshot, job_env, snapshot_upload
from cloudddp.runtime import program as runtime_program
from cloudddp.spec.model import JobSpec

ACCOUNT = late("ACCOUNT")  # filled in at launch from STS when the spec names no bucket
CHECKPOINT_LOCAL = "/opt/ml/checkpoints"
MODEL_DIR = "/opt/ml/model"
TENSORBOARD_LOCAL = "/opt/ml/output/tensorboard"  # the SDK's default TensorBoardOutputConfig.LocalPath
CODE_CHANNEL = "code"
HYPERPARAMETER_VALUE_MAX = int(LIMITS["HyperParameters{value}"].max or 2500)
CODE_ARCHIVE = f"/opt/ml/input/data/{CODE_CHANNEL}/sourcedir.tar.gz"
# The PyTorch training images' ENTRYPOINT and SageMaker's argument (aws/deep-learning-containers,
# docker/pytorch/Dockerfile.cuda and the older pytorch/training Dockerfiles): what PID 1 runs as its child.
IMAGE_ENTRY = ["bash", "-m", "start_with_right_hostname.sh", "train"]
# PID 1: take the launcher out of the code channel's archive and run it as the container's init. Each string
# is at most 256 characters (TrainingContainerEntrypointString); python3 is on PATH in every PyTorch image. The
# folder is a fresh one (mktemp), never a fixed name: two hosts sharing one /tmp (the container rehearsal runs
# them on one machine) once unpacked into the same folder at once and one of them failed.
INIT_SCRIPT = (
    "d=$(mktemp -d /tmp/cloudddp-init.XXXXXX) && tar -xzf {archive} -C $d {shim} && "
    'exec "$(command -v python3 || command -v python)" $d/{shim} --init "$@"'
)
_NAME_OK = re.compile(r"[^a-zA-Z0-9-]")
# AWS, "Train Using SageMaker Managed Warm Pools", Considerations (cloudddp/data/SOURCES.md).
WARM_POOL_WITH_SPOT = (
    "sagemaker.keep_alive with resources.spot: SageMaker managed warm pools cannot be used with "
    "spot instances (AWS SageMaker developer guide, 'Train Using SageMaker Managed Warm Pools', "
    "Considerations)"
)


@dataclass
class Rendered:
    request: dict[str, Any]
    uploads: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    estimate: dict[str, Any] | None = None
    env_sources: dict[str, EnvSource] = field(default_factory=dict)
    region: str = ""


def region_for(sm: SageMakerOptions) -> str:
    region = sm.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        raise UserError("no AWS region: set sagemaker.region in the spec, or AWS_REGION in the environment")
    return region


def role_for(sm: SageMakerOptions) -> str:
    role = sm.role or os.environ.get("CLOUDDDP_SAGEMAKER_ROLE")
    if not role:
        raise UserError(
            "no execution role: set sagemaker.role (an IAM role ARN SageMaker can assume), "
            "or CLOUDDDP_SAGEMAKER_ROLE in the environment",
            hint="the role needs AmazonSageMakerFullAccess-style permissions and read/write on the bucket",
        )
    return role


def _channel(name: str, uri: str, mode: str) -> dict[str, Any]:
    return {
        "ChannelName": name,
        "InputMode": mode,
        "DataSource": {
            "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": uri, "S3DataDistributionType": "FullyReplicated"}
        },
    }


def encode(hyperparameters: dict[str, Any]) -> dict[str, str]:
    """Every value JSON-encoded, as the SageMaker SDK sends them: the toolkit JSON-decodes each value, so a
    raw ``0.10`` would reach the script as ``0.1`` and ``true`` as ``True``."""
    return {key: json.dumps(value) for key, value in hyperparameters.items()}


def rank_zero_regex(regex: str) -> str:
    """A declared metric's MetricDefinition: its regex over global rank 0's lines only (the launcher's ``[rank0]:``
    prefix first), so SageMaker's own charts count each measurement once, as ``cloudddp metrics`` does. A regex that
    would not fit SageMaker's 500 characters that way is left as it is."""
    body = f"(?:{regex[1:]})" if regex.startswith("^") else f".*?(?:{regex})"
    tagged = re.escape(RANK_TAG.format(rank=0)) + body
    return tagged if len(tagged) <= REGEX_LIMIT else regex


REGEX_LIMIT = 500
"""The longest MetricDefinitions regex SageMaker takes."""


def shim_hyperparameters(payload: dict[str, Any]) -> dict[str, Any]:
    """The launcher's payload as ``cloudddp-NN`` hyperparameters: its JSON in standard base64, in parts
    short enough once JSON-encoded (base64 needs no escaping: each part is the limit less two quotes).

    The toolkit passes them to the shipped launcher as ``--cloudddp-NN <part>`` (keys sorted, hence the
    zero-padded numbers); the launcher joins the parts and runs the job's program with its exact argv.
    Base64, because ``sagemaker-training`` up to 5.1.2 (the one the AL2023 images pin) runs that command
    line through ``/bin/sh``, which would strip the quotes of raw JSON; base64 has no character it changes.
    """
    text = base64.b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode("ascii")
    size = HYPERPARAMETER_VALUE_MAX - 2
    return {f"cloudddp-{i:02d}": text[start : start + size] for i, start in enumerate(range(0, len(text), size))}


def shim_payload(hyperparameters: dict[str, str]) -> dict[str, Any]:
    """The launcher's payload back from a request's (JSON-encoded) ``cloudddp-NN`` hyperparameters."""
    parts = sorted(k for k in hyperparameters if k.startswith("cloudddp-"))
    text = "".join(json.loads(hyperparameters[k]) for k in parts)
    payload: dict[str, Any] = json.loads(base64.b64decode(text))
    return payload


def container_entrypoint() -> dict[str, list[str]]:
    """``ContainerEntrypoint`` and ``ContainerArguments``: cloudddp's init as PID 1, the image's entry as its child."""
    script = INIT_SCRIPT.format(archive=CODE_ARCHIVE, shim=SHIPPED_AS)
    return {"ContainerEntrypoint": ["/bin/bash", "-c", script, "cloudddp-init"], "ContainerArguments": IMAGE_ENTRY}


def job_name(spec: JobSpec, content: dict[str, Any], token: str) -> str:
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:8]
    base = _NAME_OK.sub("-", spec.name)[: 63 - len(digest) - len(token) - 2].strip("-")
    return f"{base}-{digest}-{token}"


def build(spec: JobSpec, sm: SageMakerOptions, target: SizeTarget, token: str, sigterm_grace: int) -> Rendered:
    region, role = region_for(sm), role_for(sm)
    r = Rendered(request={}, region=region)
    bucket = sm.bucket or f"sagemaker-{region}-{ACCOUNT}"
    if not sm.bucket:
        r.decisions.append(f"bucket: the SageMaker default, s3://{bucket} (account filled in at submit)")
    prefix = f"s3://{bucket}/{sm.prefix.strip('/')}"

    gpus = spec.resources.gpus_per_node
    if sm.instance_type:
        check_instance_type(sm.instance_type)  # before the catalog: a typo is named as one, with the closest type
    sizing = decide(spec, target, "instance type")
    instance_type, sku = sizing.size, sizing.sku
    r.decisions += sizing.decisions
    r.warnings += sizing.warnings
    r.estimate = sizing.estimate
    if sku is not None and gpus and gpus != sku.gpus:
        r.warnings.append(
            f"{instance_type} has {sku.gpus} GPUs but resources.gpus_per_node is {gpus}: the container starts one "
            f"process per GPU ({sku.gpus}); set gpus_per_node: {sku.gpus}"
        )
    smddp = spec.distribution.backend == "smddp"
    if smddp and spec.distribution.launcher == "torchrun":
        r.decisions.append("smddp: the container's smddp launcher (MPI) starts the processes")

    image, how = training_image(sm.image, region, sm.framework_version, sm.py_version, gpu=gpus > 0, smddp=smddp)
    r.decisions.append(f"image {image} ({how})")

    snapshot = code_snapshot(spec)
    reqs = requirements.of(spec)
    check_isolation(sm.network_isolation, reqs.lines if reqs else None)
    if reqs is not None:
        r.decisions.append(
            f"requirements ({len(reqs.lines)} from {reqs.source}): the container installs the "
            "snapshot's requirements.txt before the script starts"
        )
    code_uri = f"{prefix}/code/{snapshot.sha256}/sourcedir.tar.gz"
    r.uploads.append(snapshot_upload(spec, snapshot, code_uri))
    r.warnings += snapshot_warnings(snapshot)
    channels = []
    if CODE_CHANNEL in spec.inputs:
        raise UserError(
            f"inputs.{CODE_CHANNEL}: the name is taken by the channel that carries the code on SageMaker",
            hint="rename the input",
        )
    for name, item in spec.inputs.items():
        where = spec.input_location(name, "sagemaker")
        if "://" in where:
            if not where.startswith("s3://"):
                raise UserError(
                    f"inputs.{name}: SageMaker reads s3:// URIs or local folders, not {where}",
                    hint=f"give inputs.{name}.at.sagemaker: s3://...",
                )
            uri = where
        else:
            folder = spec.input_folder(name, where)
            files = collect(folder)
            digest = folder_digest(folder, files)
            uri = f"{prefix}/data/{name}/{digest}/"
            r.uploads.append(
                {
                    "kind": "input",
                    "name": name,
                    "source": str(folder),
                    "destination": uri,
                    "sha256": digest,
                    "bytes": sum((folder / f).stat().st_size for f in files),
                    "files": len(files),
                }
            )
        channels.append(_channel(name, uri, "FastFile" if item.mode == "mount" else "File"))

    places = Places(
        model_dir=MODEL_DIR,
        checkpoint_dir=CHECKPOINT_LOCAL,
        tensorboard_dir=TENSORBOARD_LOCAL,
        inputs={name: f"/opt/ml/input/data/{name}" for name in spec.inputs},
    )
    presets = nccl_env_presets(sku) if sku is not None and spec.resources.nodes > 1 else {}
    if presets.get("FI_PROVIDER") == "efa" and not sagemaker_efa(instance_type):
        presets = {}
        r.warnings.append(
            f"{instance_type}: EC2 gives this size EFA, but SageMaker's training toolkit does not use it there "
            "(SM_EFA_NCCL_INSTANCES): no EFA settings, NCCL runs over TCP between the hosts"
        )
    env, r.env_sources = job_env(
        spec, "sagemaker", places, on_gpu=gpus > 0, sigterm_grace=sigterm_grace, presets=presets
    )
    applied = {k: v for k, v in presets.items() if k not in spec.env}
    if applied and sku is not None:
        r.decisions.append(f"{sku.fabric} presets: " + ", ".join(f"{k}={v}" for k, v in applied.items()))

    output = spec.outputs.get("model")
    output_uri = output.path if output and output.path else f"{prefix}/output"
    checkpoint_uri = checkpoint_folder(spec, f"{prefix}/checkpoints")
    r.decisions.append(f"checkpoints in {checkpoint_uri} (this training's own folder: a resubmit resumes from it)")

    # The code arrives as a channel (as the SDK does under network isolation, and v3 always): it is in the
    # container before PID 1 starts, which takes its init from it.
    channels.append(_channel(CODE_CHANNEL, code_uri, "File"))
    submit_directory = CODE_ARCHIVE
    run = runtime_program(spec, places)
    program = {"argv": list(run.argv), "python": run.python}
    secret = {name for name, source in r.env_sources.items() if source.secret}
    # "tag": the launcher prefixes each line with its rank (a host's log stream mixes its ranks and the toolkit).
    payload: dict[str, Any] = {**program, "env": {k: v for k, v in env.items() if k not in secret}, "tag": True}
    if spec.checkpoint.files:  # linked into CheckpointConfig.LocalPath, which SageMaker syncs with its S3Uri
        payload["keep"] = list(spec.checkpoint.files)
    if plugin_picks_protocol(image) and "NCCL_PROTO" not in env:
        payload["unset"] = ["NCCL_PROTO"]
        r.decisions.append(
            "NCCL_PROTO: the toolkit forces 'simple'; this image's aws-ofi-nccl (>= 1.6) picks the protocol "
            "itself, so the launcher removes it"
        )
    hyper: dict[str, Any] = {
        **shim_hyperparameters(payload),
        "sagemaker_program": SHIPPED_AS,
        "sagemaker_submit_directory": submit_directory,
        "sagemaker_region": region,
        "sagemaker_container_log_level": 20,
        # Read by every runner, torchrun included: without it a CPU instance gets one process.
        "sagemaker_mpi_num_of_processes_per_host": spec.resources.processes,
    }
    r.decisions.append(
        f"the container's PID 1 is cloudddp's init ({SHIPPED_AS} --init; ContainerEntrypoint): it runs the "
        "image's entry and passes a stop's SIGTERM to every process; the image's toolkit starts "
        f"{SHIPPED_AS}, which runs the job's program with the spec's exact arguments and environment"
    )
    if smddp:
        hyper.update(
            {
                "sagemaker_distributed_dataparallel_enabled": True,
                "sagemaker_instance_type": instance_type,
                "sagemaker_distributed_dataparallel_custom_mpi_options": "",
            }
        )
    elif spec.distribution.launcher == "mpi":
        hyper["sagemaker_mpi_enabled"] = True
    else:
        hyper["sagemaker_torch_distributed_enabled"] = True

    resource: dict[str, Any] = {
        "InstanceType": instance_type,
        "InstanceCount": spec.resources.nodes,
        "VolumeSizeInGB": sm.volume_gb or spec.resources.disk_gb,
    }
    if sm.keep_alive:
        if spec.resources.spot:
            raise UserError(WARM_POOL_WITH_SPOT, hint="drop sagemaker.keep_alive, or set resources.spot: false")
        resource["KeepAlivePeriodInSeconds"] = sm.keep_alive
    r.decisions += check_volume(instance_type, sm.volume_kms_key, resource["VolumeSizeInGB"])
    if sm.volume_kms_key:
        resource["VolumeKmsKeyId"] = sm.volume_kms_key
    stopping: dict[str, Any] = {"MaxRuntimeInSeconds": spec.limits.max_runtime}
    if spec.resources.spot:
        wait = sm.max_wait or min(2 * spec.limits.max_runtime, 28 * 24 * 3600)
        if wait < spec.limits.max_runtime:
            raise UserError(
                f"sagemaker.max_wait ({wait} s) must be at least limits.max_runtime ({spec.limits.max_runtime} s)"
            )
        stopping["MaxWaitTimeInSeconds"] = wait
        r.decisions.append(f"managed spot: waits up to {wait} s for capacity; checkpoints resume after interruptions")
    tags = {**spec.tags, **sm.tags, "cloudddp:job": spec.name}
    content = {"resource": resource, "hyper": hyper, "image": image, "env": env, "channels": channels, "role": role}
    name = job_name(spec, content, token)
    hyper["sagemaker_job_name"] = name
    # The payload is base64: the job's name goes in before it is encoded (substitute cannot see inside).
    hyper = {k: v for k, v in hyper.items() if not k.startswith("cloudddp-")}
    hyper.update(shim_hyperparameters(substitute(payload, {RUN_ID: name})))
    request: dict[str, Any] = {
        "TrainingJobName": name,
        "RoleArn": role,
        "AlgorithmSpecification": {
            "TrainingImage": image,
            "TrainingInputMode": "File",
            **container_entrypoint(),
            # The shared script's metric lines, then what the job declares in its own words.
            "MetricDefinitions": [
                *({"Name": m, "Regex": metric_regex(m)} for m in STANDARD_METRICS),
                *(
                    {"Name": m.name, "Regex": m.regex if spec.metrics.ranks == "all" else rank_zero_regex(m.regex)}
                    for m in spec.metrics.declared
                ),
            ],
            "EnableSageMakerMetricsTimeSeries": True,
        },
        "HyperParameters": encode(hyper),
        "ResourceConfig": resource,
        "OutputDataConfig": {
            "S3OutputPath": output_uri,
            **({"KmsKeyId": sm.output_kms_key} if sm.output_kms_key else {}),
        },
        "CheckpointConfig": {"S3Uri": checkpoint_uri, "LocalPath": CHECKPOINT_LOCAL},
        "StoppingCondition": stopping,
        "Environment": env,
        "EnableManagedSpotTraining": spec.resources.spot,
        "EnableNetworkIsolation": sm.network_isolation,
        "EnableInterContainerTrafficEncryption": sm.encrypt_inter_container_traffic,
        "Tags": [{"Key": k, "Value": v} for k, v in {**tags, "cloudddp:request": name.rsplit("-", 2)[-2]}.items()],
    }
    if channels:
        request["InputDataConfig"] = channels
    if "tensorboard" in spec.outputs:  # synced to S3 while the job runs, so TensorBoard can follow it
        board = spec.outputs["tensorboard"].path or f"{prefix}/tensorboard/{spec.name}"
        request["TensorBoardOutputConfig"] = {"S3OutputPath": board, "LocalPath": TENSORBOARD_LOCAL}
        r.decisions.append(f"TensorBoard logs in {TENSORBOARD_LOCAL}, synced to {board} while the job runs")
    if sm.subnets or sm.security_group_ids:
        if not (sm.subnets and sm.security_group_ids):
            raise UserError("sagemaker.subnets and sagemaker.security_group_ids go together (VpcConfig needs both)")
        request["VpcConfig"] = {"Subnets": sm.subnets, "SecurityGroupIds": sm.security_group_ids}
    if spec.limits.max_restarts:
        request["RetryStrategy"] = {"MaximumRetryAttempts": min(30, spec.limits.max_restarts)}
        r.decisions.append(
            f"RetryStrategy: SageMaker restarts the job up to {min(30, spec.limits.max_restarts)} times only when "
            "it fails with InternalServerError (SageMaker's own fault), resuming from "
            f"{checkpoint_uri}; a failing script is not retried (torchrun's --max-restarts stays the toolkit's 0)"
        )
    for up in r.uploads:  # how launch writes them (cloudddp.backends.sagemaker.storage)
        if not sm.bucket:  # the default bucket's name is anyone's to take: S3 checks the owner on every call
            up["expected_owner"] = ACCOUNT
        if sm.output_kms_key:
            up["kms_key"] = sm.output_kms_key
    if sm.output_kms_key:
        r.decisions.append("uploads (code, inputs) encrypted with sagemaker.output_kms_key (SSE-KMS)")
    r.request = substitute(request, {RUN_ID: name})
    check_limits(r.request)
    return r
