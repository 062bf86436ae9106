"""The Azure ML CLI v2 command-job YAML and AmlCompute YAML for a spec: pure data, built with PyYAML.

These are the documents Azure ML users already know: ``az ml job create -f job.yml`` submits the job
document unchanged (``code`` is an absolute path, so it works wherever the file is saved), and
azure-ai-ml's own ``load_job`` / ``load_compute`` accept both (a test proves it for every Azure job).
Checks the SDK does not make are applied here, each an error or a warning that says what to change.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from cloudddp.backends.azureml.environment import DEFAULT_ENVIRONMENT, environment_field
from cloudddp.backends.azureml.environment import describe as describe_environment
from cloudddp.backends.azureml.inputs import job_inputs
from cloudddp.backends.azureml.limits import check_cluster_name, check_runtime
from cloudddp.backends.azureml.options import AzureMLOptions
from cloudddp.catalog import Sku, azure_rdma_by_name, disables_rdma, find, nccl_env_presets, skus
from cloudddp.catalog.sizing import SizeDecision, decide
from cloudddp.catalog.target import SizeTarget
from cloudddp.code import requirements
from cloudddp.code.shim import SHIPPED_AS
from cloudddp.code.snapshot import snapshot_warnings
from cloudddp.errors import UserError
from cloudddp.observe.units import human_bytes
from cloudddp.plan import EnvSource, substitute
from cloudddp.runtime import RUN_ID, Places, Program, checkpoint_folder, code_snapshot, job_env, unpacked
from cloudddp.runtime import program as runtime_program
from cloudddp.spec.model import JobSpec

JOB_SCHEMA = "https://azuremlschemas.azureedge.net/latest/commandJob.schema.json"
COMPUTE_SCHEMA = "https://azuremlschemas.azureedge.net/latest/amlCompute.schema.json"
DISTRIBUTION_KEYS = {"pytorch": {"type", "process_count_per_instance"}, "mpi": {"type", "process_count_per_instance"}}
DEFAULT_DATASTORE = "azureml://datastores/workspaceblobstore/paths"
_NAME_OK = re.compile(r"[^a-zA-Z0-9_-]")
SSH_USER = "azureuser"


@dataclass
class Documents:
    job: dict[str, Any]
    compute: dict[str, Any]
    decisions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    estimate: dict[str, Any] | None = None
    env_sources: dict[str, EnvSource] = field(default_factory=dict)


def cluster_name(az: AzureMLOptions) -> str:
    return az.compute or "cloudddp-gpu"


def job_name(spec: JobSpec, content: dict[str, Any], token: str) -> str:
    """The job's name, lower-case: azure-ai-ml's ``load_job`` lower-cases a job name before submitting it, so a
    mixed-case name would not be the name (nor the MLflow run id) the job gets."""
    digest = hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()[:8]
    base = _NAME_OK.sub("-", spec.name)[:200].strip("-_")
    return f"{base}-{digest}-{token}".lower()


_BINDING = re.compile(r"\$\{\{[A-Za-z0-9_.]+\}\}")
"""An Azure ML binding in a command (``${{inputs.data}}``, ``${{outputs.model}}``): Azure ML replaces it."""


def _command(spec: JobSpec, run: Program, bindings: dict[str, str]) -> str:
    """The shell command Azure ML runs on each process. Variables whose value is an Azure ML binding
    (``${{outputs.model}}``) are set in front of it, because only the command is resolved by Azure ML;
    ${{...}} references are left unquoted, every other character is shlex-quoted (the text around a reference
    too). A job that declares metrics, requirements
    or checkpoint.files runs under the shipped launcher, which logs the metrics to the job's MLflow run
    (Studio's metrics) and installs the requirements on each node before the program starts; so does every job
    of the MPI distribution, where the launcher sets the torch.distributed variables from Open MPI's."""
    program = ["python", *run.argv] if run.python else list(run.argv)
    shim: dict[str, Any] = {}
    if spec.metrics.declared:
        shim["metrics"] = [m.model_dump() for m in spec.metrics.declared]
    if spec.checkpoint.files:  # linked into the checkpoints output, mounted read-write on every node
        shim["keep"] = list(spec.checkpoint.files)
    reqs = requirements.of(spec)
    if reqs is not None:
        shim["requirements"] = {"file": requirements.FILE, "digest": reqs.digest}
    if shim or spec.distribution.launcher == "mpi":  # under mpirun the launcher sets RANK, WORLD_SIZE, ...
        payload = json.dumps(shim, separators=(",", ":"))
        program = ["python", SHIPPED_AS, "--cloudddp-00", payload, "--", *program]
    quoted = [quote_around_bindings(a) for a in program]
    return " ".join([f"{k}={quote_around_bindings(v)}" for k, v in bindings.items()] + quoted)


def quote_around_bindings(text: str) -> str:
    """``text`` for the shell, its ``${{...}}`` references left for Azure ML to replace and every other character
    shlex-quoted: ``${{outputs.model}}/my results; touch x`` is one argument, not a second command."""
    parts: list[str] = []
    at = 0
    for binding in _BINDING.finditer(text):
        if binding.start() > at:
            parts.append(shlex.quote(text[at : binding.start()]))
        parts.append(binding.group())
        at = binding.end()
    if at < len(text) or not parts:
        parts.append(shlex.quote(text[at:]))
    return "".join(parts)


def _check_distribution(distribution: dict[str, Any]) -> None:
    """azure-ai-ml drops unknown keys inside a distribution silently; refuse them instead."""
    allowed = DISTRIBUTION_KEYS.get(distribution.get("type", ""), set())
    unknown = sorted(set(distribution) - allowed)
    if unknown:
        raise UserError(
            f"distribution: unknown key(s) {unknown} for type {distribution.get('type')!r} "
            f"(allowed: {sorted(allowed)}); Azure ML would silently drop them"
        )


DEFAULT_SHM = "16g"
UCX_FOR_MPI = {"UCX_TLS": "tcp", "UCX_NET_DEVICES": "eth0"}


def shm_size(az: AzureMLOptions, sku: Sku | None) -> str:
    """``azureml.shm_size``, else half the VM size's memory (the catalog's), else :data:`DEFAULT_SHM`: Docker's
    64 MB would stall DataLoader workers, and all of a VM's memory would leave none for the processes."""
    if az.shm_size is not None:
        return az.shm_size
    if sku is None or not sku.ram_gb:
        return DEFAULT_SHM
    return f"{max(1, int(sku.ram_gb // 2))}g"


def _one_letter_apart(a: str, b: str) -> bool:
    """``b`` is ``a`` with one character added or dropped (``..._v44`` for ``..._v4``)."""
    if abs(len(a) - len(b)) != 1:
        return False
    short, long = sorted((a, b), key=len)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def unknown_size(spec: JobSpec, target: SizeTarget) -> SizeDecision | None:
    """A GPU size named in ``azureml.vm_size`` that the catalog does not have: Azure ML may well run it (the
    region's list says, at preflight), so it renders, with a warning of what cloudddp cannot check."""
    if not target.named or find(target.named) is not None or not spec.resources.gpus_per_node:
        return None
    close = [s.size for s in skus("azure") if _one_letter_apart(s.size.lower(), target.named.lower())]
    typo = f" (did you mean '{close[0]}'?)" if close else ""  # a size of another shape is no typo: not named
    return SizeDecision(
        target.named,
        None,
        warnings=[
            f"{target.field}: {target.named}{typo} is not in cloudddp's catalog: its GPUs, memory and interconnect are "
            "unknown to cloudddp, so it does not check resources.gpus_per_node against its GPU count or whether "
            "it has InfiniBand, and gives no cost estimate (the preflight checks that the region offers it; "
            "`az ml compute list-sizes` lists its GPUs and memory)"
        ],
    )


def build(spec: JobSpec, az: AzureMLOptions, target: SizeTarget, token: str, sigterm_grace: int) -> Documents:
    docs = Documents(job={}, compute={})
    gpus, nodes = spec.resources.gpus_per_node, spec.resources.nodes
    check_cluster_name(cluster_name(az))
    check_runtime(spec.limits.max_runtime, spot=spec.resources.spot)

    snapshot = code_snapshot(spec)
    docs.decisions.append(
        f"code: snapshot {snapshot.sha256[:12]} ({len(snapshot.files)} files, "
        f"{human_bytes(snapshot.size)}), the same bytes every backend runs"
    )
    docs.warnings += snapshot_warnings(snapshot)
    reqs = requirements.of(spec)
    if reqs is not None:
        docs.decisions.append(
            f"requirements ({len(reqs.lines)} from {reqs.source}): installed by the shipped launcher on each node, "
            "before the program starts, into an environment over the image's Python (every job pays the install; "
            "an image with them in azureml.environment starts faster)"
        )
    sizing = unknown_size(spec, target) or decide(spec, target, "VM size")
    size, sku = sizing.size, sizing.sku
    docs.decisions += sizing.decisions
    docs.warnings += sizing.warnings
    docs.estimate = sizing.estimate
    group = spec.process_group_backend(on_gpu=gpus > 0)
    # RDMA only helps a process group that uses it: NCCL (GPUs). gloo (CPU) talks TCP, InfiniBand or not.
    wants_rdma = spec.resources.interconnect == "rdma" or (spec.resources.interconnect == "auto" and group == "nccl")
    if not sizing.decisions and nodes > 1 and wants_rdma:
        rdma, why = azure_rdma_by_name(size)
        if not rdma:
            docs.warnings.append(f"{why}: multi-node DDP over Ethernet does not scale; pick an InfiniBand size")
    if not gpus and group == "gloo":
        docs.decisions.append(
            f"CPU training: {spec.resources.processes} process(es) per node; gloo uses TCP, not "
            "RDMA, so no InfiniBand size is needed"
        )
    if sku is not None and gpus:
        if gpus > sku.gpus:
            raise UserError(
                f"resources.gpus_per_node is {gpus} but {size} has {sku.gpus} GPUs: Azure ML would start {gpus} "
                f'processes per node and fail with "Duplicate GPU detected"',
                hint=f"set resources.gpus_per_node: {sku.gpus}, or pick a size with {gpus} GPUs",
            )
        if gpus < sku.gpus:
            docs.warnings.append(
                f"{size} has {sku.gpus} GPUs; {gpus} processes per node leave {sku.gpus - gpus} idle "
                f"(set resources.gpus_per_node: {sku.gpus})"
            )

    presets: dict[str, str] = {}
    if nodes > 1 and sku is not None and sku.scales_multi_node:
        killers = disables_rdma({k: e.value or "" for k, e in spec.env.items()})
        if killers:
            raise UserError(
                f"env: {'; '.join(killers)} on an InfiniBand job of {nodes} nodes",
                hint="remove it: NCCL would fall back to TCP and the job would not scale",
            )
        presets = nccl_env_presets(sku)
        applied = {k: v for k, v in presets.items() if k not in spec.env}
        if applied:
            docs.decisions.append("InfiniBand presets: " + ", ".join(f"{k}={v}" for k, v in applied.items()))

    if nodes > 1 and spec.distribution.launcher == "mpi":
        # Open MPI's own traffic (not NCCL's) over TCP on eth0, as Microsoft's ACPT MPI jobs set it: UCX would
        # otherwise probe transports a container may lack.
        ucx = {k: v for k, v in UCX_FOR_MPI.items() if k not in spec.env}
        presets.update(ucx)
        if ucx:
            docs.decisions.append(
                "MPI presets (as Azure's ACPT MPI jobs): " + ", ".join(f"{k}={v}" for k, v in ucx.items())
            )

    inputs, input_decisions = job_inputs(spec)
    docs.decisions += input_decisions
    places = Places(
        model_dir="${{outputs.model}}",
        checkpoint_dir="${{outputs.checkpoints}}" if spec.checkpoint.enabled else None,
        tensorboard_dir="${{outputs.tensorboard}}",
        inputs={name: f"${{{{inputs.{name}}}}}" for name in spec.inputs},
    )
    all_env, docs.env_sources = job_env(
        spec, "azureml", places, on_gpu=gpus > 0, sigterm_grace=sigterm_grace, presets=presets
    )
    bindings = {k: v for k, v in all_env.items() if "${{" in v}
    env = {k: v for k, v in all_env.items() if k not in bindings}

    outputs: dict[str, Any] = {}
    for name in ("model", *(["tensorboard"] if "tensorboard" in spec.outputs else [])):
        outputs[name] = {"type": "uri_folder", "mode": "rw_mount"}
        output = spec.outputs.get(name)
        if output and output.path:
            outputs[name]["path"] = output.path
    if spec.checkpoint.enabled:
        ckpt = checkpoint_folder(spec, f"{DEFAULT_DATASTORE}/cloudddp/checkpoints").rstrip("/") + "/"
        outputs["checkpoints"] = {"type": "uri_folder", "mode": "rw_mount", "path": ckpt}
        docs.decisions.append(f"checkpoints in {ckpt} (this training's own folder: a resubmit resumes from it)")

    distribution = {
        "type": "mpi" if spec.distribution.launcher == "mpi" else "pytorch",
        "process_count_per_instance": spec.resources.processes,
    }
    _check_distribution(distribution)
    if distribution["type"] == "pytorch":  # Azure's PyTorch distribution sets no LOCAL_WORLD_SIZE: the contract does
        env.setdefault("LOCAL_WORLD_SIZE", str(spec.resources.processes))
    # limits.max_restarts: the backend's capabilities (Feature.MAX_RESTARTS) say it once, as every caveat.
    if az.job_tier:
        raise UserError(
            f"azureml.job_tier: {az.job_tier} applies to serverless compute only "
            f"(queue_settings.job_tier), and this job runs on the cluster {cluster_name(az)}, whose tier "
            "decides",
            hint="remove azureml.job_tier; resources.spot: true runs the job on a low-priority cluster",
        )
    environment = environment_field(az.environment)
    docs.decisions.append(describe_environment(az.environment))
    if not gpus and az.environment == DEFAULT_ENVIRONMENT:
        docs.decisions.append(
            "the curated PyTorch environments are all CUDA builds (there is no CPU one); this one "
            "runs on CPU nodes as it is, a larger image to pull: set azureml.environment to a CPU "
            "image of your own to pull less"
        )
    tier = "low_priority" if spec.resources.spot else "dedicated"
    if spec.resources.spot and spec.checkpoint.enabled and spec.checkpoint.every_minutes is None:
        docs.warnings.append(
            "resources.spot: Azure ML takes low-priority nodes back without a signal to the processes, so a "
            "resubmit resumes from the last epoch's checkpoint; checkpoint.every_minutes (e.g. 15) bounds what is lost"
        )
    job: dict[str, Any] = {
        "$schema": JOB_SCHEMA,
        "type": "command",
        "display_name": spec.name,
        "experiment_name": az.experiment_name or spec.name,
        "code": str(unpacked(snapshot.path)),
        "command": _command(spec, runtime_program(spec, places), bindings),
        "environment": environment,
        "compute": f"azureml:{cluster_name(az)}",
        "distribution": distribution,
        "resources": {"instance_count": nodes, "shm_size": shm_size(az, sku)},
        "environment_variables": env,
        "limits": {"timeout": spec.limits.max_runtime},
        "tags": {**spec.tags, "cloudddp:job": spec.name},
    }
    if spec.description:
        job["description"] = spec.description
    if inputs:
        job["inputs"] = inputs
    job["outputs"] = outputs
    compute = {
        "$schema": COMPUTE_SCHEMA,
        "name": cluster_name(az),
        "type": "amlcompute",
        "size": size,
        "min_instances": az.min_nodes,
        "max_instances": max(nodes, az.max_nodes or nodes),
        "idle_time_before_scale_down": az.idle_time_before_scale_down,
        "tier": tier,
        "ssh_public_access_enabled": az.ssh_public_key is not None,
    }
    if az.subnet is not None:
        compute["network_settings"] = {"subnet": az.subnet}
    if not az.node_public_ip:
        compute["enable_node_public_ip"] = False
    if az.identity is not None:
        compute["identity"] = (
            {"type": "system_assigned"}
            if az.identity == "system"
            else {"type": "user_assigned", "user_assigned_identities": [{"resource_id": az.identity}]}
        )
    if az.ssh_public_key is not None:
        compute["ssh_settings"] = {"admin_username": SSH_USER, "ssh_key_value": az.ssh_public_key}
        docs.decisions.append(f"a new cluster allows SSH as {SSH_USER} with azureml.ssh_public_key")
    if spec.resources.spot:
        docs.decisions.append(
            "low priority cluster (tier low_priority): cheaper, preemptible; checkpoints resume the job"
        )
    docs.decisions.append(
        f"cluster {compute['name']}: created when missing as {size}, {tier}, "
        f"{compute['min_instances']}–{compute['max_instances']} nodes, scaling down after "
        f"{az.idle_time_before_scale_down} s idle; an existing one keeps its settings, and only its "
        f"max_instances is raised when below {compute['max_instances']}"
    )
    name = job_name(spec, {"job": job, "compute": compute}, token)
    job = substitute({"$schema": job.pop("$schema"), "name": name, **job}, {RUN_ID: name})
    docs.job, docs.compute = job, compute
    return docs
