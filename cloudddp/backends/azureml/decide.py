"""What an Azure ML job is, decided once from its spec and ``azureml:`` options: the cluster and its tier, the VM
size (one the catalog does not know included), the GPU checks, the InfiniBand and MPI presets, the inputs, where
things are in the job, its environment and the bindings Azure ML resolves, the outputs and the checkpoint folder,
the distribution, the environment image and /dev/shm.

document.py builds the job and compute documents from an :class:`AzureMLDecision`, explain.py the plan's lines.
Checks the SDK does not make are applied here, each an error that says what to change, in the order a render
always made them (the first refusal is the one said).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from cloudddp.backends.azureml.environment import environment_field
from cloudddp.backends.azureml.inputs import job_inputs
from cloudddp.backends.azureml.limits import check_cluster_name, check_runtime
from cloudddp.backends.azureml.options import AzureMLOptions
from cloudddp.backends.azureml.workspace import workspace_fields
from cloudddp.catalog import Sku, azure_rdma_by_name, disables_rdma, find, nccl_env_presets
from cloudddp.catalog.sizing import SizeDecision
from cloudddp.catalog.sizing import decide as decide_size
from cloudddp.catalog.target import SizeTarget
from cloudddp.code import requirements
from cloudddp.code.requirements import Requirements
from cloudddp.code.shipped import Snapshot
from cloudddp.errors import UserError
from cloudddp.plan import EnvSource
from cloudddp.runtime import Places, Program, checkpoint_folder, checkpoint_owner, code_snapshot, fabric_of, job_env
from cloudddp.runtime import program as runtime_program
from cloudddp.spec.model import JobSpec

AUTO_CLUSTER = "auto"
"""``azureml.compute: auto``: a cluster of cloudddp's own, named after its workspace, size and tier
(:func:`auto_cluster_name`)."""
DEFAULT_DATASTORE = "azureml://datastores/workspaceblobstore/paths"
DEFAULT_SHM = "16g"
UCX_FOR_MPI = {"UCX_TLS": "tcp", "UCX_NET_DEVICES": "eth0"}
SSH_USER = "azureuser"
LOW_PRIORITY = "low_priority"
CLUSTER_SETTINGS = frozenset(
    {"min_nodes", "max_nodes", "idle_time_before_scale_down", "ssh_public_key", "subnet", "node_public_ip", "identity"}
)
"""``azureml.*`` settings of a cluster, which a serverless job has none of."""


@dataclass(frozen=True)
class Cluster:
    """The AmlCompute cluster the job runs on, with the settings it is created with when it is missing."""

    name: str
    size: str
    tier: str
    """``dedicated``, or ``low_priority`` for ``resources.spot``."""
    min_instances: int
    max_instances: int
    idle_s: int
    """Seconds idle nodes stay up before the cluster scales down."""
    subnet: str | None
    node_public_ip: bool
    identity: str | None
    """``system``, a user-assigned identity's resource id, or None."""
    ssh_public_key: str | None
    auto: bool
    """Named by cloudddp after its size and tier (``azureml.compute: auto``), not by the spec."""

    @property
    def spot(self) -> bool:
        return self.tier == LOW_PRIORITY


@dataclass(frozen=True)
class Serverless:
    """Serverless compute (no ``azureml.compute``): Azure ML provisions the nodes for this job alone and releases
    them when it ends; the job names the size (``resources.instance_type``) and the tier (``queue_settings``)."""

    instance_type: str
    job_tier: str
    """``spot`` for ``resources.spot``, else ``standard`` (or ``azureml.job_tier`` when given and consistent)."""

    @property
    def spot(self) -> bool:
        return self.job_tier == "spot"


@dataclass(frozen=True)
class AzureMLDecision:
    """Every choice of an Azure ML render, each made once by :func:`decide`."""

    name: str
    description: str | None
    experiment: str
    tags: dict[str, str]
    snapshot: Snapshot
    requirements: Requirements | None
    sizing: SizeDecision
    """The VM size (its catalog entry when known), with its plan lines, warnings and estimate."""
    compute: Cluster | Serverless
    """A named AmlCompute cluster (``azureml.compute``), else serverless compute."""
    unused: list[str]
    """``azureml.*`` cluster settings the spec gives for a serverless job, which has no cluster to apply them to."""
    nodes: int
    gpus: int
    """GPUs per node; 0 for CPU training."""
    processes: int
    """Processes per node."""
    process_group: str
    ethernet_only: str | None
    """Why the size has no InfiniBand, for a multi-node job whose process group would use it; else None."""
    infiniband: dict[str, str]
    """The InfiniBand size's NCCL presets that the spec's env does not set."""
    mpi: dict[str, str]
    """The UCX presets of a multi-node MPI job that the spec's env does not set."""
    inputs: dict[str, Any]
    """The job document's ``inputs``."""
    input_notes: list[str]
    """What an input became, where that is not what its name says."""
    program: Program
    launcher: dict[str, Any]
    """What the shipped launcher, which runs every process's program, is told."""
    bindings: dict[str, str]
    """Variables whose value is an Azure ML binding (``${{outputs.model}}``): set in front of the command."""
    env: dict[str, str]
    """The job document's ``environment_variables``."""
    env_sources: dict[str, EnvSource]
    outputs: dict[str, str | None]
    """The outputs besides the checkpoints, each with the spec's path (None: Azure ML's default)."""
    checkpoints: str | None
    """This training's checkpoint folder (an output); None when checkpointing is off."""
    checkpoint_owner: str
    """Why the checkpoints are there (:func:`cloudddp.runtime.checkpoint_owner`)."""
    checkpoint_minutes: float | None
    """``checkpoint.every_minutes``: what bounds what an eviction loses."""
    distribution: str
    """``pytorch`` or ``mpi``."""
    environment: str
    """``azureml.environment`` as given."""
    identity: str | None
    """``azureml.job_identity``: ``user`` or ``managed``, the identity the job reads data with; None: Azure ML's."""
    environment_value: str | dict[str, Any]
    """The job document's ``environment``: the reference, or ``{image: ...}`` for a Docker image."""
    shm_size: str
    timeout: int


MPIRUN_STOP_SECONDS = 1
"""What a rank has under the MPI distribution once mpirun passes a stop on: Open MPI's mpirun sends SIGCONT, waits
``odls_base_sigkill_timeout`` (1 s), sends SIGTERM, waits as long again and SIGKILLs; raising the timeout only
delays the SIGTERM (measured with Open MPI 4.1.4: docs/stopping.md)."""


def decide(spec: JobSpec, az: AzureMLOptions, target: SizeTarget, *, sigterm_grace: int) -> AzureMLDecision:
    """The choices of ``spec`` on Azure ML; a UserError for what Azure ML would refuse or not run as asked."""
    check_runtime(spec.limits.max_runtime, spot=spec.resources.spot)
    _check_no_launcher(spec)
    snapshot = code_snapshot(spec)
    reqs = requirements.of(spec)
    sizing = unknown_size(spec, target) or decide_size(spec, target, "VM size")
    gpus = spec.resources.gpus_per_node
    group = spec.process_group_backend(on_gpu=gpus > 0)
    _check_gpus(gpus, sizing)
    infiniband = _infiniband_presets(spec, sizing.sku)
    mpi = _mpi_presets(spec)
    inputs, input_notes = job_inputs(spec)
    places = _places(spec, sizing.sku)
    grace = MPIRUN_STOP_SECONDS if spec.distribution.launcher == "mpi" else sigterm_grace
    env, bindings, sources = _environment(spec, places, {**infiniband, **mpi}, grace)
    compute = _compute(spec, az, sizing.size)
    environment = environment_field(az.environment)
    program = runtime_program(spec, places)
    return AzureMLDecision(
        name=spec.name,
        description=spec.description,
        experiment=az.experiment_name or spec.name,
        tags={**spec.tags, "cloudddp:job": spec.name},
        snapshot=snapshot,
        requirements=reqs,
        sizing=sizing,
        compute=compute,
        unused=sorted(CLUSTER_SETTINGS & az.model_fields_set) if isinstance(compute, Serverless) else [],
        nodes=spec.resources.nodes,
        gpus=gpus,
        processes=spec.resources.processes,
        process_group=group,
        ethernet_only=_ethernet_only(spec, sizing, group),
        infiniband=infiniband,
        mpi=mpi,
        inputs=inputs,
        input_notes=input_notes,
        program=program,
        launcher=_launcher(spec, reqs),
        bindings=bindings,
        env=env,
        env_sources=sources,
        outputs=_outputs(spec),
        checkpoints=_checkpoints(spec),
        checkpoint_owner=checkpoint_owner(spec),
        checkpoint_minutes=spec.checkpoint.every_minutes,
        distribution="mpi" if spec.distribution.launcher == "mpi" else "pytorch",
        environment=az.environment,
        identity=az.job_identity,
        environment_value=environment,
        shm_size=shm_size(az, sizing.sku),
        timeout=spec.limits.max_runtime,
    )


_LAUNCHERS = (
    ("torchrun",),
    ("python", "-m", "torch.distributed.run"),
    ("python", "-m", "torch.distributed.launch"),
    ("accelerate", "launch"),
)


def _check_no_launcher(spec: JobSpec) -> None:
    """``code.command`` is what each process runs: a launcher there would start its own processes in each of the
    ``process_count_per_instance`` processes Azure ML's distribution starts (8 torchruns on an 8-GPU node)."""
    words = tuple(w.rsplit("/", 1)[-1] for w in spec.code.command or ())
    words = ("python", *words[1:]) if words and words[0].startswith("python") else words
    found = next((launcher for launcher in _LAUNCHERS if words[: len(launcher)] == launcher), None)
    if found is None:
        return
    raise UserError(
        f"code.command starts with {' '.join(found)}, a launcher: on Azure ML every process of the job runs "
        f"code.command, and Azure ML's distribution already starts {spec.resources.processes} per node, so each "
        "would start its own",
        hint="give the script itself (code.entry and code.args, or code.command without the launcher): cloudddp's "
        "launcher and Azure ML start one process per GPU",
    )


def unknown_size(spec: JobSpec, target: SizeTarget) -> SizeDecision | None:
    """A GPU size named in ``azureml.vm_size`` that the catalog does not have: Azure ML may well run it (the
    region's list says, at preflight), so it renders, with a warning of what cloudddp cannot check."""
    if not target.named or find(target.named) is not None or not spec.resources.gpus_per_node:
        return None
    return SizeDecision(
        target.named,
        None,
        warnings=[
            f"{target.field}: {target.named} is not in cloudddp's catalog: its GPUs, memory and interconnect are "
            "unknown to cloudddp, so it does not check resources.gpus_per_node against its GPU count or whether "
            "it has InfiniBand, and gives no cost estimate (the preflight checks that the region offers it; "
            "`az ml compute list-sizes` lists its GPUs and memory)"
        ],
    )


def _check_gpus(gpus: int, sizing: SizeDecision) -> None:
    """More processes per node than the size has GPUs is refused: Azure ML would start them and fail."""
    sku = sizing.sku
    if sku is not None and gpus > sku.gpus:
        raise UserError(
            f"resources.gpus_per_node is {gpus} but {sizing.size} has {sku.gpus} GPUs: Azure ML would start {gpus} "
            f'processes per node and fail with "Duplicate GPU detected"',
            hint=f"set resources.gpus_per_node: {sku.gpus}, or pick a size with {gpus} GPUs",
        )


def _ethernet_only(spec: JobSpec, sizing: SizeDecision, group: str) -> str | None:
    """Why the size has no InfiniBand, for a multi-node job that wants it, when the size chooser said nothing of
    the size (a size it chose or weighed has its verdict in the chooser's own lines)."""
    # RDMA only helps a process group that uses it: NCCL (GPUs). gloo (CPU) talks TCP, InfiniBand or not.
    interconnect = spec.resources.interconnect
    wants_rdma = interconnect == "rdma" or (interconnect == "auto" and group == "nccl")
    if sizing.decisions or spec.resources.nodes <= 1 or not wants_rdma:
        return None
    rdma, why = azure_rdma_by_name(sizing.size)
    return None if rdma else why


def _infiniband_presets(spec: JobSpec, sku: Sku | None) -> dict[str, str]:
    """The NCCL settings a multi-node job on an InfiniBand size carries, those the spec's env does not set; a
    UserError when the env turns InfiniBand off."""
    nodes = spec.resources.nodes
    if nodes <= 1 or sku is None or not sku.scales_multi_node:
        return {}
    killers = disables_rdma({k: e.value or "" for k, e in spec.env.items()})
    if killers:
        raise UserError(
            f"env: {'; '.join(killers)} on an InfiniBand job of {nodes} nodes",
            hint="remove it: NCCL would fall back to TCP and the job would not scale",
        )
    return {k: v for k, v in nccl_env_presets(sku).items() if k not in spec.env}


def _mpi_presets(spec: JobSpec) -> dict[str, str]:
    """Open MPI's own traffic (not NCCL's) over TCP on eth0, as Microsoft's ACPT MPI jobs set it: UCX would
    otherwise probe transports a container may lack. Those the spec's env does not set."""
    if spec.resources.nodes <= 1 or spec.distribution.launcher != "mpi":
        return {}
    return {k: v for k, v in UCX_FOR_MPI.items() if k not in spec.env}


def _places(spec: JobSpec, sku: Sku | None) -> Places:
    """Where things are in the job: Azure ML's bindings, which it replaces with the mounted paths; the fabric the
    size was chosen for (an InfiniBand size, more than one node: what the interconnect pre-flight checks)."""
    nodes = spec.resources.nodes
    return Places(
        model_dir="${{outputs.model}}",
        nodes=nodes,
        processes_per_node=spec.resources.processes,
        checkpoint_dir="${{outputs.checkpoints}}" if spec.checkpoint.enabled else None,
        tensorboard_dir="${{outputs.tensorboard}}",
        inputs={name: f"${{{{inputs.{name}}}}}" for name in spec.inputs},
        fabric=fabric_of(sku.fabric, sku.fabric_gbps, nodes) if sku is not None else None,
    )


def _environment(
    spec: JobSpec, places: Places, presets: dict[str, str], sigterm_grace: int
) -> tuple[dict[str, str], dict[str, str], dict[str, EnvSource]]:
    """The job's variables and the bindings among them (``${{outputs.model}}``: only the command is resolved by
    Azure ML, so they are set in front of it), and where the late values come from."""
    all_env, sources = job_env(
        spec, "azureml", places, on_gpu=spec.resources.gpus_per_node > 0, sigterm_grace=sigterm_grace, presets=presets
    )
    bindings = {k: v for k, v in all_env.items() if "${{" in v}
    env = {k: v for k, v in all_env.items() if k not in bindings}
    if spec.distribution.launcher != "mpi":  # Azure's PyTorch distribution sets no LOCAL_WORLD_SIZE: the contract does
        env.setdefault("LOCAL_WORLD_SIZE", str(spec.resources.processes))
    return env, bindings, sources


def _outputs(spec: JobSpec) -> dict[str, str | None]:
    names = ("model", *(["tensorboard"] if "tensorboard" in spec.outputs else []))
    paths: dict[str, str | None] = {}
    for name in names:
        output = spec.outputs.get(name)
        paths[name] = output.path if output and output.path else None
    return paths


def _checkpoints(spec: JobSpec) -> str | None:
    """This training's own checkpoint folder in the workspace's datastore: a resubmit resumes from it."""
    if not spec.checkpoint.enabled:
        return None
    return checkpoint_folder(spec, f"{DEFAULT_DATASTORE}/cloudddp/checkpoints").rstrip("/") + "/"


def _compute(spec: JobSpec, az: AzureMLOptions, size: str) -> Cluster | Serverless:
    """Serverless compute unless ``azureml.compute`` names a cluster (or ``auto``: one named after its size and
    tier); a UserError for a setting of the other path, or for ``limits.recover_to: next_size`` on a cluster
    named by hand (a cluster has one size: the next size could never run on it)."""
    spot = spec.resources.spot
    if az.compute is None:
        return Serverless(size, _job_tier(az, spot=spot))
    if az.job_tier:
        raise UserError(
            f"azureml.job_tier: {az.job_tier} applies to serverless compute only (queue_settings.job_tier), and this "
            f"job runs on the cluster {az.compute}, whose tier decides",
            hint="remove azureml.job_tier (resources.spot: true runs the job on a low-priority cluster), or remove "
            "azureml.compute to run serverless",
        )
    name = (
        auto_cluster_name(size, spot=spot, workspace=workspace_fields(az)) if az.compute == AUTO_CLUSTER else az.compute
    )
    check_cluster_name(name)
    if spec.limits.recover_to == "next_size" and az.compute != AUTO_CLUSTER:
        raise UserError(
            f"limits.recover_to: next_size moves a recovery to another VM size, and the cluster {az.compute} "
            "(azureml.compute) has one size: the next size could never run on it",
            hint="remove azureml.compute (serverless compute takes any size), or set azureml.compute: auto "
            "(a cluster per size, named after it)",
        )
    return _cluster(spec, az, name, size)


def _job_tier(az: AzureMLOptions, *, spot: bool) -> str:
    """The serverless job tier: ``spot`` for ``resources.spot``, else ``standard``, the two tiers serverless
    compute takes (Azure ML's "Model training on serverless compute": "Possible values are Standard and Spot");
    ``azureml.job_tier`` may name one, never contradict ``resources.spot``."""
    wanted = "spot" if spot else "standard"
    if az.job_tier is None:
        return wanted
    if (az.job_tier == "spot") != spot:
        raise UserError(
            f"azureml.job_tier: {az.job_tier} contradicts resources.spot: {str(spot).lower()}",
            hint=f"remove azureml.job_tier (resources.spot chooses: {wanted}), or set resources.spot: "
            f"{str(az.job_tier == 'spot').lower()}",
        )
    return az.job_tier


def auto_cluster_name(size: str, *, spot: bool, workspace: dict[str, str]) -> str:
    """``cdp<tag>-nd96asrv4-d`` for Standard_ND96asr_v4 dedicated, ``...-lp`` low priority: one cluster per size
    and tier, so a CPU job, a GPU job, a spot job and the next size of a recovery never meet on one cluster. The
    tag (:func:`workspace_tag`) makes the name the workspace's own: Azure ML wants a compute name unique across
    all computes of its region. At most 24 characters, as Azure ML accepts, the size's core cut to fit."""
    core = re.sub(r"[^a-z0-9]", "", size.lower().removeprefix("standard_"))
    suffix = "-lp" if spot else "-d"
    prefix = f"cdp{workspace_tag(workspace)}-"
    return f"{prefix}{core[: 24 - len(prefix) - len(suffix)]}{suffix}"


def workspace_tag(workspace: dict[str, str]) -> str:
    """Five letters and digits from the workspace's subscription, resource group and name (as far as they are
    known): the same for every job of one workspace, another for another workspace."""
    named = "/".join(workspace.get(key, "").lower() for key in ("subscription_id", "resource_group", "name"))
    number = int.from_bytes(hashlib.sha256(named.encode()).digest()[:8], "big")
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    return "".join(digits[number // 36**i % 36] for i in range(5))


def _launcher(spec: JobSpec, reqs: Requirements | None) -> dict[str, Any]:
    """Every job runs under the shipped launcher: it passes a stop to the program once and keeps it from the
    program's DataLoader workers (torchrun signals its worker's whole process group); it logs declared metrics to
    the job's MLflow run (Studio's metrics), installs the requirements on each node before the program starts, and
    under mpirun sets the torch.distributed variables from Open MPI's."""
    shim: dict[str, Any] = {}
    if spec.metrics.declared:
        shim["metrics"] = [m.model_dump() for m in spec.metrics.declared]
    if spec.checkpoint.files:  # linked into the checkpoints output, mounted read-write on every node
        shim["keep"] = list(spec.checkpoint.files)
    if reqs is not None:
        shim["requirements"] = {"file": requirements.FILE, "digest": reqs.digest}
    return shim


def _cluster(spec: JobSpec, az: AzureMLOptions, name: str, size: str) -> Cluster:
    nodes = spec.resources.nodes
    return Cluster(
        name=name,
        size=size,
        tier=LOW_PRIORITY if spec.resources.spot else "dedicated",
        min_instances=az.min_nodes,
        max_instances=max(nodes, az.max_nodes or nodes),
        idle_s=az.idle_time_before_scale_down,
        subnet=az.subnet,
        node_public_ip=az.node_public_ip,
        identity=az.identity,
        ssh_public_key=az.ssh_public_key,
        auto=az.compute == AUTO_CLUSTER,
    )


def shm_size(az: AzureMLOptions, sku: Sku | None) -> str:
    """``azureml.shm_size``, else half the VM size's memory (the catalog's), else :data:`DEFAULT_SHM`: Docker's
    64 MB would stall DataLoader workers, and all of a VM's memory would leave none for the processes."""
    if az.shm_size is not None:
        return az.shm_size
    if sku is None or not sku.ram_gb:
        return DEFAULT_SHM
    return f"{max(1, int(sku.ram_gb // 2))}g"
