"""Every choice of a SageMaker training job, made once from the spec: where it runs and as whom, the instance
type, the image and how the toolkit starts the processes, the code snapshot and input channels with their uploads,
the S3 places, the environment, the launcher's payload and the instances' limits.

:func:`decide` refuses here what SageMaker would refuse or silently ignore, in the order a spec's problems have
always been named; :mod:`cloudddp.backends.sagemaker.request` builds the CreateTrainingJob request from the
decision and :mod:`cloudddp.backends.sagemaker.explain` the plan's lines.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Literal

from cloudddp.backends.sagemaker.efa import plugin_picks_protocol, sagemaker_efa
from cloudddp.backends.sagemaker.hardware import uncatalogued
from cloudddp.backends.sagemaker.images import training_image
from cloudddp.backends.sagemaker.options import SageMakerOptions
from cloudddp.backends.sagemaker.smddp import own_script_warnings, preload
from cloudddp.backends.sagemaker.volumes import check_isolation, check_volume
from cloudddp.catalog import find, nccl_env_presets, sizing
from cloudddp.catalog.sizing import SizeDecision
from cloudddp.catalog.target import SizeTarget
from cloudddp.code import requirements
from cloudddp.code.requirements import Requirements
from cloudddp.code.scan import collect
from cloudddp.code.shipped import Snapshot
from cloudddp.code.snapshot import folder_digest
from cloudddp.errors import UserError
from cloudddp.injob.shim import RANK_TAG
from cloudddp.plan import EnvSource, late
from cloudddp.runtime import (
    Places,
    checkpoint_folder,
    checkpoint_owner,
    code_snapshot,
    fabric_of,
    job_env,
    snapshot_upload,
)
from cloudddp.runtime import program as runtime_program
from cloudddp.spec.model import JobSpec

ACCOUNT = late("ACCOUNT")  # filled in at launch from STS when the spec names no bucket
CHECKPOINT_LOCAL = "/opt/ml/checkpoints"
MODEL_DIR = "/opt/ml/model"
TENSORBOARD_LOCAL = "/opt/ml/output/tensorboard"  # the SDK's default TensorBoardOutputConfig.LocalPath
CODE_CHANNEL = "code"
REGEX_LIMIT = 500
"""The longest MetricDefinitions regex SageMaker takes."""
# AWS, "Train Using SageMaker Managed Warm Pools", Considerations (cloudddp/data/SOURCES.md).
WARM_POOL_WITH_SPOT = (
    "sagemaker.keep_alive with resources.spot: SageMaker managed warm pools cannot be used with "
    "spot instances (AWS SageMaker developer guide, 'Train Using SageMaker Managed Warm Pools', "
    "Considerations)"
)

Runner = Literal["smddp", "mpi", "torchrun"]
"""What the image's toolkit starts the processes with: smddp under MPI, MPI, or torchrun on every node."""


@dataclass(frozen=True)
class Channel:
    """An input channel: FastFile streams from S3 while the job reads (``mode: mount``), File copies first."""

    name: str
    uri: str
    mode: Literal["File", "FastFile"]


@dataclass(frozen=True)
class Storage:
    """Where the job's files are in S3, and what submit uploads there first."""

    bucket: str
    default_bucket: bool
    """The spec names no bucket: SageMaker's default one, whose owner each upload checks."""
    snapshot: Snapshot
    requirements: Requirements | None
    uploads: tuple[dict[str, Any], ...]
    """How launch writes them (:mod:`cloudddp.backends.sagemaker.storage`): the code first, then the inputs."""
    channels: tuple[Channel, ...]
    """The inputs' channels, then the code's."""
    output_uri: str
    checkpoint_uri: str
    checkpoint_owner: str
    """Why the checkpoints are there (:func:`cloudddp.runtime.checkpoint_owner`)."""
    tensorboard_uri: str | None
    """None when the spec declares no ``outputs.tensorboard``."""
    kms_key: str | None
    """``sagemaker.output_kms_key``: the outputs' and the uploads' key."""


@dataclass(frozen=True)
class Launch:
    """What the container runs: the image, how its toolkit starts the processes, their environment and argv."""

    image: str
    image_how: str
    runner: Runner
    launcher: str
    """The spec's ``distribution.launcher``, which smddp overrides."""
    processes: int
    """Processes per host."""
    env: dict[str, str]
    env_sources: dict[str, EnvSource]
    presets: dict[str, str]
    """The fabric's NCCL settings the spec does not set itself."""
    efa_dropped: bool
    """EC2 gives the size EFA, SageMaker's toolkit does not use it: no EFA settings."""
    unset_proto: bool
    """The launcher removes the toolkit's ``NCCL_PROTO`` (the image's plugin picks the protocol itself)."""
    payload: dict[str, Any]
    """The launcher's: the program's argv, the environment (no secrets), the files to keep, what to unset."""
    grace: int
    """Seconds between a stop's SIGTERM and SIGKILL (StopTrainingJob's 120), which torchrun and mpirun are given."""
    program_warnings: tuple[str, ...]
    """What may keep the job's own program from working here (smddp: :mod:`.smddp`)."""


@dataclass(frozen=True)
class Instances:
    """ResourceConfig and StoppingCondition: the instances, their volume, and how long they run and wait."""

    instance_type: str
    count: int
    volume_gb: int
    volume_kms_key: str | None
    volume_notes: tuple[str, ...]
    keep_alive: int
    spot: bool
    max_runtime: int
    max_wait: int | None
    """Managed spot only: the longest wait for capacity plus the runtime."""


@dataclass(frozen=True)
class SageMakerDecision:
    """The choices a SageMaker render makes, each made once by :func:`decide`."""

    name: str
    region: str
    role: str
    size: SizeDecision
    gpus_per_node: int
    """What the spec asks for; the instance type's own count may differ (a warning)."""
    instances: Instances
    launch: Launch
    storage: Storage
    metrics: tuple[tuple[str, str], ...]
    """The declared metrics' names and the regexes SageMaker's charts use for them."""
    subnets: tuple[str, ...]
    security_group_ids: tuple[str, ...]
    retries: int
    """RetryStrategy's MaximumRetryAttempts; 0 for none."""
    tags: dict[str, str]
    network_isolation: bool
    encrypt_inter_container_traffic: bool


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


def decide(spec: JobSpec, sm: SageMakerOptions, target: SizeTarget, sigterm_grace: int) -> SageMakerDecision:
    """Each choice once; a spec with several problems is refused for the first of them in this order (settings,
    instance type, image, code and inputs, environment, instances, network)."""
    region, role = region_for(sm), role_for(sm)
    size = _size(spec, target)
    gpu, smddp = spec.resources.gpus_per_node > 0, spec.distribution.backend == "smddp"
    image, how = training_image(sm.image, region, sm.framework_version, sm.py_version, gpu=gpu, smddp=smddp)
    storage = _storage(spec, sm, region)
    launch = _launch(spec, size, image, how, sigterm_grace)
    instances = _instances(spec, sm, size.size)
    if (sm.subnets or sm.security_group_ids) and not (sm.subnets and sm.security_group_ids):
        raise UserError("sagemaker.subnets and sagemaker.security_group_ids go together (VpcConfig needs both)")
    return SageMakerDecision(
        name=spec.name,
        region=region,
        role=role,
        size=size,
        gpus_per_node=spec.resources.gpus_per_node,
        instances=instances,
        launch=launch,
        storage=storage,
        metrics=tuple(
            (m.name, m.regex if spec.metrics.ranks == "all" else rank_zero_regex(m.regex))
            for m in spec.metrics.declared
        ),
        subnets=tuple(sm.subnets),
        security_group_ids=tuple(sm.security_group_ids),
        retries=min(30, spec.limits.max_restarts),
        tags={**spec.tags, **sm.tags, "cloudddp:job": spec.name},
        network_isolation=sm.network_isolation,
        encrypt_inter_container_traffic=sm.encrypt_inter_container_traffic,
    )


def _size(spec: JobSpec, target: SizeTarget) -> SizeDecision:
    """The catalog's choice or check; a GPU job naming a valid type the catalog lacks is checked against EC2's
    description of it (:mod:`.hardware`)."""
    if target.named and spec.resources.gpus_per_node and find(target.named) is None:
        return uncatalogued(spec, target.named)
    return sizing.decide(spec, target, "instance type")


def _runner(spec: JobSpec) -> Runner:
    if spec.distribution.backend == "smddp":
        return "smddp"
    return "mpi" if spec.distribution.launcher == "mpi" else "torchrun"


def rank_zero_regex(regex: str) -> str:
    """A declared metric's MetricDefinition: its regex over global rank 0's lines only (the launcher's ``[rank0]:``
    prefix first), so SageMaker's own charts count each measurement once, as ``cloudddp metrics`` does. A regex that
    would not fit SageMaker's 500 characters that way is left as it is."""
    body = f"(?:{regex[1:]})" if regex.startswith("^") else f".*?(?:{regex})"
    tagged = re.escape(RANK_TAG.format(rank=0)) + body
    return tagged if len(tagged) <= REGEX_LIMIT else regex


def _storage(spec: JobSpec, sm: SageMakerOptions, region: str) -> Storage:
    bucket = sm.bucket or f"sagemaker-{region}-{ACCOUNT}"
    prefix = f"s3://{bucket}/{sm.prefix.strip('/')}"
    snapshot = code_snapshot(spec)
    reqs = requirements.of(spec)
    check_isolation(sm.network_isolation, reqs.lines if reqs else None)
    code_uri = f"{prefix}/code/{snapshot.sha256}/sourcedir.tar.gz"
    uploads = [snapshot_upload(spec, snapshot, code_uri)]
    channels = []
    if CODE_CHANNEL in spec.inputs:
        raise UserError(
            f"inputs.{CODE_CHANNEL}: the name is taken by the channel that carries the code on SageMaker",
            hint="rename the input",
        )
    for name, item in spec.inputs.items():
        uri, upload = _input(spec, name, prefix)
        uploads += [upload] if upload else []
        channels.append(Channel(name, uri, "FastFile" if item.mode == "mount" else "File"))
    # The code arrives as a channel (as the SDK does under network isolation, and v3 always): it is in the
    # container before PID 1 starts, which takes its init from it.
    channels.append(Channel(CODE_CHANNEL, code_uri, "File"))
    for up in uploads:
        if not sm.bucket:  # the default bucket's name is anyone's to take: S3 checks the owner on every call
            up["expected_owner"] = ACCOUNT
        if sm.output_kms_key:
            up["kms_key"] = sm.output_kms_key
    output = spec.outputs.get("model")
    board = spec.outputs.get("tensorboard")
    return Storage(
        bucket=bucket,
        default_bucket=not sm.bucket,
        snapshot=snapshot,
        requirements=reqs,
        uploads=tuple(uploads),
        channels=tuple(channels),
        output_uri=output.path if output and output.path else f"{prefix}/output",
        checkpoint_uri=checkpoint_folder(spec, f"{prefix}/checkpoints"),
        checkpoint_owner=checkpoint_owner(spec),
        tensorboard_uri=(board.path or f"{prefix}/tensorboard/{spec.name}") if board is not None else None,
        kms_key=sm.output_kms_key,
    )


def _input(spec: JobSpec, name: str, prefix: str) -> tuple[str, dict[str, Any] | None]:
    """Where SageMaker reads input ``name``, and its upload when it is a local folder."""
    where = spec.input_location(name, "sagemaker")
    if "://" in where:
        if not where.startswith("s3://"):
            raise UserError(
                f"inputs.{name}: SageMaker reads s3:// URIs or local folders, not {where}",
                hint=f"give inputs.{name}.at.sagemaker: s3://...",
            )
        return where, None
    folder = spec.input_folder(name, where)
    files = collect(folder)
    digest = folder_digest(folder, files)
    uri = f"{prefix}/data/{name}/{digest}/"
    return uri, {
        "kind": "input",
        "name": name,
        "source": str(folder),
        "destination": uri,
        "sha256": digest,
        "bytes": sum((folder / f).stat().st_size for f in files),
        "files": len(files),
    }


def _launch(spec: JobSpec, size: SizeDecision, image: str, how: str, sigterm_grace: int) -> Launch:
    sku, nodes = size.sku, spec.resources.nodes
    presets = nccl_env_presets(sku) if sku is not None and nodes > 1 else {}
    efa_dropped = presets.get("FI_PROVIDER") == "efa" and not sagemaker_efa(size.size)
    if efa_dropped:
        presets = {}
    places = Places(
        model_dir=MODEL_DIR,
        nodes=nodes,
        processes_per_node=spec.resources.processes,
        checkpoint_dir=CHECKPOINT_LOCAL,
        tensorboard_dir=TENSORBOARD_LOCAL,
        inputs={name: f"/opt/ml/input/data/{name}" for name in spec.inputs},
        fabric=None if sku is None or efa_dropped else fabric_of(sku.fabric, sku.fabric_gbps, nodes),
    )
    env, env_sources = job_env(
        spec, "sagemaker", places, on_gpu=spec.resources.gpus_per_node > 0, sigterm_grace=sigterm_grace, presets=presets
    )
    unset_proto = plugin_picks_protocol(image) and "NCCL_PROTO" not in env
    return Launch(
        image=image,
        image_how=how,
        runner=_runner(spec),
        launcher=spec.distribution.launcher,
        processes=spec.resources.processes,
        env=env,
        env_sources=env_sources,
        presets={k: v for k, v in presets.items() if k not in spec.env},
        efa_dropped=efa_dropped,
        unset_proto=unset_proto,
        payload=_payload(spec, places, env, env_sources, unset_proto),
        grace=sigterm_grace,
        program_warnings=tuple(own_script_warnings(spec)),
    )


def _payload(
    spec: JobSpec, places: Places, env: dict[str, str], env_sources: dict[str, EnvSource], unset_proto: bool
) -> dict[str, Any]:
    run = runtime_program(spec, places)
    program = {"argv": list(run.argv), "python": run.python}
    secret = {name for name, source in env_sources.items() if source.secret}
    # "tag": the launcher prefixes each line with its rank (a host's log stream mixes its ranks and the toolkit).
    payload: dict[str, Any] = {**program, "env": {k: v for k, v in env.items() if k not in secret}, "tag": True}
    if spec.checkpoint.files:  # linked into CheckpointConfig.LocalPath, which SageMaker syncs with its S3Uri
        payload["keep"] = list(spec.checkpoint.files)
    if unset_proto:
        payload["unset"] = ["NCCL_PROTO"]
    if preload(spec):  # imported in the script's process before it runs: smddp's backend registered
        payload["preload"] = preload(spec)
    return payload


def _instances(spec: JobSpec, sm: SageMakerOptions, instance_type: str) -> Instances:
    if sm.keep_alive and spec.resources.spot:
        raise UserError(WARM_POOL_WITH_SPOT, hint="drop sagemaker.keep_alive, or set resources.spot: false")
    volume_gb = sm.volume_gb or spec.resources.disk_gb
    notes = check_volume(instance_type, sm.volume_kms_key, volume_gb)
    return Instances(
        instance_type=instance_type,
        count=spec.resources.nodes,
        volume_gb=volume_gb,
        volume_kms_key=sm.volume_kms_key,
        volume_notes=tuple(notes),
        keep_alive=sm.keep_alive,
        spot=spec.resources.spot,
        max_runtime=spec.limits.max_runtime,
        max_wait=_max_wait(spec, sm) if spec.resources.spot else None,
    )


def _max_wait(spec: JobSpec, sm: SageMakerOptions) -> int:
    wait = sm.max_wait or min(2 * spec.limits.max_runtime, 28 * 24 * 3600)
    if wait < spec.limits.max_runtime:
        raise UserError(
            f"sagemaker.max_wait ({wait} s) must be at least limits.max_runtime ({spec.limits.max_runtime} s)"
        )
    return wait
