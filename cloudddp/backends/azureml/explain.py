"""The lines an Azure ML plan shows, generated from its decision: what was chosen and why, and the warnings of
what will not go as the spec may expect."""

from __future__ import annotations

from cloudddp.backends.azureml.decide import AUTO_CLUSTER, SSH_USER, AzureMLDecision, Serverless
from cloudddp.backends.azureml.environment import DEFAULT_ENVIRONMENT
from cloudddp.backends.azureml.environment import describe as describe_environment
from cloudddp.code.shipped import snapshot_warnings
from cloudddp.observe.units import human_bytes
from cloudddp.spec.model import JobSpec
from cloudddp.spec.values import written


def explain(d: AzureMLDecision) -> tuple[list[str], list[str]]:
    """The plan's decision lines and its warnings, in the order a plan has always shown them."""
    return _decisions(d), _warnings(d)


def _decisions(d: AzureMLDecision) -> list[str]:
    lines = [
        f"code: snapshot {d.snapshot.sha256[:12]} ({len(d.snapshot.files)} files, "
        f"{human_bytes(d.snapshot.size)}), the same bytes every backend runs"
    ]
    if d.requirements is not None:
        lines.append(
            f"requirements ({len(d.requirements.lines)} from {d.requirements.source}): installed by the shipped "
            "launcher on each node, before the program starts, into an environment over the image's Python (every "
            "job pays the install; an image with them in azureml.environment starts faster)"
        )
    lines += d.sizing.decisions
    if not d.gpus and d.process_group == "gloo":
        lines.append(
            f"CPU training: {d.processes} process(es) per node; gloo uses TCP, not "
            "RDMA, so no InfiniBand size is needed"
        )
    if d.infiniband:
        lines.append("InfiniBand presets: " + ", ".join(f"{k}={v}" for k, v in d.infiniband.items()))
    if d.mpi:
        lines.append("MPI presets (as Azure's ACPT MPI jobs): " + ", ".join(f"{k}={v}" for k, v in d.mpi.items()))
    lines += d.input_notes
    if d.checkpoints is not None:
        lines.append(
            f"checkpoints in {d.checkpoints} ({d.checkpoint_owner}): a resubmit finds its checkpoints there "
            "(not read at render)"
        )
    lines.append(describe_environment(d.environment))
    if not d.gpus and d.environment == DEFAULT_ENVIRONMENT:
        lines.append(
            "the curated PyTorch environments are all CUDA builds (there is no CPU one); this one "
            "runs on CPU nodes as it is, a larger image to pull: set azureml.environment to a CPU "
            "image of your own to pull less"
        )
    return lines + _cluster_lines(d)


def _cluster_lines(d: AzureMLDecision) -> list[str]:
    if isinstance(d.compute, Serverless):
        return [_stop_line(d), *_serverless_lines(d, d.compute)]
    cluster, lines = d.compute, []
    if cluster.ssh_public_key is not None:
        lines.append(f"a new cluster allows SSH as {SSH_USER} with azureml.ssh_public_key")
    if cluster.spot:
        lines.append("low priority cluster (tier low_priority): cheaper, preemptible; checkpoints resume the job")
    lines.append(_stop_line(d))
    named = f"azureml.compute: {AUTO_CLUSTER}, named after its size and tier" if cluster.auto else "azureml.compute"
    lines.append(
        f"cluster {cluster.name} ({named}): created when missing as {cluster.size}, {cluster.tier}, "
        f"{cluster.min_instances}–{cluster.max_instances} nodes, scaling down after "
        f"{cluster.idle_s} s idle; an existing one keeps its settings, and only its "
        f"max_instances is raised when below {cluster.max_instances}"
    )
    return lines


def _serverless_lines(d: AzureMLDecision, on: Serverless) -> list[str]:
    tier = "spot (resources.spot: true)" if on.spot else f"{on.job_tier} (resources.spot: false)"
    lines = [
        f"serverless compute (no azureml.compute): Azure ML provisions {d.nodes} × {on.instance_type} for this job "
        f"alone and releases them when it ends (no idle scale-down to pay); job tier {tier}; no cluster is created "
        "or changed, so the identity needs no computes/write (the built-in AzureML Data Scientist role suffices); "
        "quota is counted as for a cluster of that size and tier"
    ]
    if on.spot:
        lines.append("spot tier: cheaper, preemptible; a preempted job is restarted by Azure ML from its checkpoints")
    return lines


def _stop_line(d: AzureMLDecision) -> str:
    grace = d.env["CLOUDDDP_SIGTERM_GRACE"]
    how = (
        f"mpirun passes it on and SIGKILLs the ranks {grace} s later (Open MPI's own timing)"
        if d.distribution == "mpi"
        else f"the script is told {grace} s (CLOUDDDP_SIGTERM_GRACE), the notice a low-priority VM may get"
    )
    return (
        "a stop: Azure documents no signal to a job's processes; one that comes reaches each rank's program once, "
        f"through cloudddp's rank launcher: {how}; declared checkpoint.files are kept within about a second of each "
        "save, whatever comes"
    )


def _warnings(d: AzureMLDecision) -> list[str]:
    warnings = snapshot_warnings(d.snapshot) + d.sizing.warnings
    if d.unused:
        warnings.append(
            f"{', '.join('azureml.' + u for u in d.unused)}: cluster settings, and this job runs on serverless "
            "compute (no azureml.compute), so they do nothing; name a cluster in azureml.compute to use them"
        )
    if d.ethernet_only is not None:
        warnings.append(f"{d.ethernet_only}: multi-node DDP over Ethernet does not scale; pick an InfiniBand size")
    sku = d.sizing.sku
    if sku is not None and d.gpus and d.gpus < sku.gpus:
        warnings.append(
            f"{d.sizing.size} has {sku.gpus} GPUs; {d.gpus} processes per node leave {sku.gpus - d.gpus} idle "
            f"(set resources.gpus_per_node: {sku.gpus})"
        )
    if d.distribution == "mpi" and d.checkpoints is not None and d.checkpoint_minutes is None:
        warnings.append(
            "distribution.launcher mpi: a stop gives each rank about 1 s (mpirun SIGKILLs it right after passing "
            "SIGTERM on), too little to save; checkpoint.every_minutes (e.g. 15) bounds what a stop loses"
        )
    if d.compute.spot and d.checkpoints is not None and d.checkpoint_minutes is None:
        warnings.append(
            "resources.spot: Azure ML takes low-priority nodes back without a signal to the processes, so a "
            "resubmit resumes from the last epoch's checkpoint; checkpoint.every_minutes (e.g. 15) bounds what is lost"
        )
    return warnings


def queue_line(spec: JobSpec, moves: bool) -> list[str]:
    """The plan's word on a job left ``Queued`` (a cluster that cannot scale, quota in use by other jobs: Azure ML
    fails neither): where the recovery can move (``moves``: next sizes to go to, or ``recover_to: any_backend``),
    after ``limits.queue_timeout`` it is cancelled and moves on, as a refusal for quota at submission does at once."""
    if not (moves or spec.limits.recover_to == "any_backend"):
        return []
    return [
        f"queue: a job still Queued after limits.queue_timeout ({written(spec.limits.queue_timeout)}) is cancelled "
        "and the recovery moves on as after a capacity failure; a refusal for quota at submission moves at once"
    ]
