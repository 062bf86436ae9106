"""A Slurm plan's decision lines and warnings, written from the render's decision (what ``cloudddp render``
and ``plan`` show before anything is sent)."""

from __future__ import annotations

from cloudddp.backends.checkpoints import contents
from cloudddp.backends.slurm import flags, images, workdir
from cloudddp.backends.slurm.decide import SlurmDecision, graces
from cloudddp.code.shipped import snapshot_warnings
from cloudddp.observe.units import human_bytes


def explain(decision: SlurmDecision) -> tuple[list[str], list[str]]:
    """The plan's decisions and warnings, in the order a person reads them."""
    d = decision
    decisions = [_processes(d), _places(d), _code(d), _grace(d)]
    if d.places.checkpoint_dir:
        decisions.append(_checkpoints(d, d.places.checkpoint_dir))
    decisions += [_cpus(d), _time_limit(d), _preemption(d)]
    decisions += [line for line in (_requirements(d), _container(d)) if line]
    return decisions, _warnings(d)


def _processes(d: SlurmDecision) -> str:
    return f"{d.nodes} node(s) × {d.processes_per_node} process(es) on {'GPU' if d.on_gpu else 'CPU'}, " + (
        "one torchrun agent per node, c10d rendezvous on the first node's address"
        if d.launch == "torchrun"
        else "one srun task per process, ranks from SLURM_PROCID"
    )


def _places(d: SlurmDecision) -> str:
    return (
        f"Slurm's commands run {d.shell.where}; run folder {d.layout.run_dir} (a shared filesystem; the working "
        f"folder from {d.workdir_origin}; `cloudddp storage` shows and removes what runs left there)"
    )


def _code(d: SlurmDecision) -> str:
    snapshot = d.snapshot
    return (
        f"code snapshot {snapshot.sha256[:12]} ({len(snapshot.files)} files, "
        f"{human_bytes(snapshot.size)}) kept once in {d.layout.workdir}/code, unpacked into the "
        "run folder: the job never runs your source tree"
    )


def _grace(d: SlurmDecision) -> str:
    """The grace the script is told, where Slurm's numbers come from, and who passes the stop to whom."""
    found = graces(d.options)
    told = f"SIGTERM grace {d.grace} s (CLOUDDDP_SIGTERM_GRACE): a cancel, a requeue or the time limit gives KillWait"
    told += f" (slurm.kill_wait {d.options.kill_wait} s)"
    if "slurm.grace_time" in found:
        told += f", a preemption the partition's GraceTime (slurm.grace_time {found['slurm.grace_time']} s)"
        if len(set(found.values())) > 1:
            told += f": the script is told the smaller, {d.grace} s"
    who = (
        f"torchrun's agent waits for its ranks as long as any stop lasts (TORCH_ELASTIC_SHUTDOWN_TIMEOUT "
        f"{d.env.get('TORCH_ELASTIC_SHUTDOWN_TIMEOUT')} s; the time limit's lasts {d.stop_lead} s and more)"
        if d.launch == "torchrun"
        else "each rank runs under cloudddp's launcher"
    )
    return (
        f"{told}. Slurm signals every process of the job step itself, each rank once; {who}, and a rank's "
        "launcher passes nothing on (its DataLoader workers get Slurm's SIGTERM too, and ignore it: cloudddp's hooks "
        "in the program)"
    )


def _checkpoints(d: SlurmDecision, folder: str) -> str:
    """Which folder and why; what the run will start from where the folder is known and this machine's to read."""
    if d.found is None:
        unread = "in the working folder resolved at submit" if workdir.WORKDIR in folder else "on the cluster"
        note = f"a requeued or resubmitted job finds its checkpoints there ({unread}: not read at render)"
    else:
        note = contents.resume_note(d.found, never=d.never_resume)
    return f"checkpoints in {folder} ({d.checkpoint_owner}): {note}"


def _cpus(d: SlurmDecision) -> str:
    holds = f"{d.per_task} process(es) per Slurm task" if d.per_task > 1 else "one process per Slurm task"
    if d.cpus_per_process:
        return (
            f"{d.cpus_per_process} CPU(s) per training process, {holds}: sbatch and srun get "
            f"--cpus-per-task={d.cpus_per_task}"
        )
    return (
        f"CPUs per training process decided at submit: the partition's nodes' CPUs shared among their "
        f"GPUs ({holds}; set slurm.cpus_per_process to choose)"
    )


def _time_limit(d: SlurmDecision) -> str:
    return (
        f"time limit {d.time_minutes} min (Slurm counts minutes); the training is asked to checkpoint and "
        f"stop {d.stop_lead} s before it"
        + (
            f"; limits.max_runtime ({d.budget_seconds} s) runs as a chain of such allocations, each requeued after "
            "its checkpoint"
            if d.budget_seconds
            else ""
        )
    )


def _preemption(d: SlurmDecision) -> str:
    return "preempted (with or without a grace time): the training checkpoints on SIGTERM and the job " + (
        "is requeued and resumes" if d.options.requeue else "ends (slurm.requeue is off)"
    )


def _requirements(d: SlurmDecision) -> str | None:
    reqs, opts = d.requirements, d.options
    if reqs is None:
        return None
    by = f"at submit {d.shell.where}" if opts.install_on == "login" else "by the job on its first node"
    return (
        f"requirements ({len(reqs.lines)} from {reqs.source}): installed {by} into {d.requirements_env} over "
        f"{opts.python}'s packages, once per base (slurm.python, modules, setup) and list; used while "
        "its recorded sha256 matches"
    )


def _container(d: SlurmDecision) -> str | None:
    container = d.options.container
    if container is None:
        return None
    return f"container image {container.image}: " + (
        "a file, used as it is"
        if images.is_file(container)
        else f"imported once (by the first job that needs it, on its first node) into {d.image}, "
        "then run from that file by every node"
    )


def _warnings(d: SlurmDecision) -> list[str]:
    """What the plan warns of: the code snapshot's oddities, what cloudddp cannot check on a cluster it does
    not know, and restarts srun cannot make."""
    warnings = list(snapshot_warnings(d.snapshot))
    differ = contents.arguments_warning(d.found, d.arguments) if d.found and not d.never_resume else None
    warnings += [differ] if differ else []
    if d.fabric_unplaced:
        warnings.append(
            f"{d.nodes} GPU nodes want InfiniBand between them, and cloudddp cannot see this cluster's "
            "fabric: name the nodes that have it (slurm.constraint, e.g. ib, or slurm.partition), or set "
            "resources.interconnect: any"
        )
    if d.accelerator_unsent:
        warnings.append(
            f"resources.accelerator {d.accelerator_unsent} is not sent to Slurm: set slurm.gpu_type (the "
            "cluster's GRES type name) or slurm.constraint"
        )
    site = flags.site_options(d.options.sbatch_options)
    if site:
        warnings.append(
            f"slurm.sbatch_options: {', '.join(site)} is not one of sbatch's own options (Slurm 22.05-24.11): a "
            "plugin's (SPANK, e.g. pyxis) or a newer Slurm's; submit checks it against the cluster's sbatch --help"
        )
    if d.max_restarts and d.launch == "srun":
        warnings.append(
            "limits.max_restarts: restarting processes needs torchrun (slurm.launch: torchrun); "
            "with srun a failed process fails the job (slurm.requeue resubmits after node failures)"
        )
    return warnings
