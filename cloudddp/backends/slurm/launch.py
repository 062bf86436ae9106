"""Sending a Slurm plan: the working folder resolved where render left it to submit (:mod:`.workdir`), the code
snapshot onto the cluster's shared filesystem (content-addressed, unpacked into the run's folder), the script
written there, the requirements environment built where Slurm's commands run, then ``sbatch --parsable``; the
job's name is the run id, so a retried launch finds its job instead of submitting another. And cancelling a run:
``scancel`` (SIGTERM first, KillWait seconds to checkpoint).
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from cloudddp.backends.base import Launched, Progress
from cloudddp.backends.checkpoints import contents
from cloudddp.backends.slurm import envs
from cloudddp.backends.slurm.answers import LIVE, cpus_per_gpu
from cloudddp.backends.slurm.record import SlurmRunInfo
from cloudddp.backends.slurm.request import CpusAtSubmit, LoginEnvironment, SlurmRequest, SlurmTarget
from cloudddp.backends.slurm.script import RDZV_ID_VARIABLE
from cloudddp.backends.slurm.shell import Shell, on_cluster
from cloudddp.backends.slurm.status import job_record
from cloudddp.backends.slurm.workdir import bound
from cloudddp.errors import UserError
from cloudddp.observe.units import human_bytes
from cloudddp.plan import Plan
from cloudddp.runtime import packed

_SHA256 = 'sha256sum "$1" 2>/dev/null | cut -d" " -f1'
"""The sha256 of a file on the cluster (nothing when it is missing)."""
_UNPACK = (
    'test -d "$1" && exit 0; got=$(sha256sum "$2" | cut -d" " -f1); '
    'if [ "$got" != "$3" ]; then echo "the code snapshot $2 is not the one uploaded: sha256 $got, expected $3" >&2; '
    "exit 3; fi; "
    'mkdir -p "$1.tmp.$$" && tar --no-same-owner -xzf "$2" -C "$1.tmp.$$" && mv "$1.tmp.$$" "$1"'
)
"""Unpack the snapshot into the run's code folder, once its sha256 is the one the plan names: the archive sits
in a shared working folder under a name anyone on the same commit computes, so its content is checked."""


def submit(plan: Plan[SlurmRequest, SlurmTarget], progress: Progress | None) -> Launched:
    """The plan's job submitted (or found, when a launch of it got that far before), and its run record."""
    plan = bound(plan, progress)
    req = plan.request
    shell = Shell.of(plan.target)
    found = find(shell, req.run_id, req.clusters)
    if found:
        if progress:
            progress.step(f"Slurm job {found[0]} is this plan's run already: not submitted again")
        return Launched(req.run_id, _run_info(plan, shell, *found).to_dict())
    _prepare(shell, plan, progress)
    sbatch = list(req.sbatch)
    if req.cpus_at_submit:
        cpus = cpus_per_task(shell, req.cpus_at_submit, progress, req.clusters)
        sbatch.insert(1, f"--cpus-per-task={cpus}")
    carried = {name: plan.reveal(req.env[name]) for name in req.env_from_submit}
    if req.launch == "torchrun":
        carried[RDZV_ID_VARIABLE] = secrets.token_hex(16)  # a rendezvous only the job can name
    submitted = time.time()
    job_id, _, cluster = shell.run_with_env(sbatch, carried).strip().partition(";")  # "id;cluster" with -M
    if req.checkpoint_dir:
        _record(shell, req, submitted)
    if progress:
        progress.step(f"submitted Slurm job {job_id} ({req.run_id}) {shell.where}{_of(cluster)}")
    return Launched(req.run_id, _run_info(plan, shell, job_id, cluster or req.clusters).to_dict())


def _of(cluster: str) -> str:
    return f", to cluster {cluster}" if cluster else ""


def _record(shell: Shell, req: SlurmRequest, submitted: float) -> None:
    """Which arguments write the checkpoints from now on, beside them (a later plan compares its own). The job is
    queued already: a folder that refuses the line costs the comparison, not the submit."""
    line = contents.record_line(req.run_id, req.arguments, submitted)
    where = f"{req.checkpoint_dir}/{contents.RECORD}"
    shell.run(["bash", "-c", 'cat >> "$1"', "cloudddp-record", where], stdin=line, check=False)


def _run_info(plan: Plan[SlurmRequest, SlurmTarget], shell: Shell, job_id: str, cluster: str | None) -> SlurmRunInfo:
    """What the run record keeps to find the run again."""
    req = plan.request
    return SlurmRunInfo(
        login_host=shell.login_host,
        ssh_options=shell.ssh_options,
        name=plan.job_name,
        run_dir=req.run_dir,
        batch_log=req.batch_log,
        node_logs=req.node_logs,
        nodes=req.nodes,
        processes_per_node=req.processes_per_node,
        launch=req.launch,
        kill_wait=req.kill_wait,
        status_every=req.status_every,
        job_id=job_id,
        cluster=cluster or None,
    )


def _prepare(shell: Shell, plan: Plan[SlurmRequest, SlurmTarget], progress: Progress | None) -> None:
    """Everything the job needs on the cluster before sbatch: its code, folders, script and environment."""
    req = plan.request
    for upload in plan.uploads:
        _upload(shell, upload, progress)
        where = [req.code_dir, upload["destination"], upload["sha256"]]
        shell.run(["bash", "-c", _UNPACK, "cloudddp-unpack", *where], timeout=600)
    shell.run(["mkdir", "-p", *req.folders])
    shell.write(req.script_path, plan.documents["job.sbatch"].encode())
    if req.environment:
        _environment(shell, req.environment, req.code_dir, progress)


def _environment(shell: Shell, env: LoginEnvironment, code_dir: str, progress: Progress | None) -> None:
    """Build (or check) the requirements environment where Slurm's commands run, before the job needs it."""
    if progress:
        progress.step(f"requirements environment {env.folder} {shell.where}: checking, building if needed")
    text = envs.login_build(env.folder, env.python, env.key, code_dir=code_dir, modules=env.modules, setup=env.setup)
    done = shell.run(["bash", "-c", text], timeout=3600, check=False)
    said = [line for line in done.stdout.decode(errors="replace").splitlines() if line.startswith("cloudddp: ")]
    if done.returncode != 0:
        why = [line for line in done.stderr.decode(errors="replace").splitlines() if line.strip()][-4:]
        raise UserError(
            f"the job's requirements could not be installed {shell.where}: " + " / ".join(why or said),
            hint="fix the requirement pip names, or set slurm.install_on: job to install them in the job",
        )
    if progress:
        for line in said:
            progress.step(line.removeprefix("cloudddp: "))


def cpus_per_task(shell: Shell, wanted: CpusAtSubmit, progress: Progress | None, cluster: str | None = None) -> int:
    """--cpus-per-task when slurm.cpus_per_process is not given: each process gets its GPU's share of the
    CPUs of the partition's smallest GPU node (1 when Slurm shows no such node)."""
    partition = ["-p", wanted.partition] if wanted.partition else []
    listed = shell.run(["sinfo", *on_cluster(cluster), "-h", "-N", *partition, "-o", "%c %G"], check=False)
    nodes = listed.stdout.decode(errors="replace")
    found = cpus_per_gpu(nodes, wanted.gpus_per_node)
    if progress:
        progress.step(
            f"{found} CPU(s) per training process: the partition's nodes' CPUs shared among their GPUs "
            "(slurm.cpus_per_process chooses)"
            if found
            else f"1 CPU per training process: sinfo shows no node with {wanted.gpus_per_node} GPUs to share "
            "its CPUs among (set slurm.cpus_per_process)"
        )
    return (found or 1) * wanted.per_task


def find(shell: Shell, run_id: str, clusters: str | None = None) -> tuple[str, str | None] | None:
    """The Slurm job named ``run_id`` (pending, running or recently ended) and its cluster (with ``clusters``:
    sbatch's ``-M`` value, one name or several), if any."""
    listed = shell.text(
        ["squeue", *on_cluster(clusters), "-h", "-t", "all", f"--name={run_id}", "-O", "JobID: ,Cluster:"]
    )
    rows = [line.split() for line in listed.splitlines() if line.strip()]
    return (rows[0][0], rows[0][1] if clusters and len(rows[0]) > 1 else None) if rows else None


def _upload(shell: Shell, upload: dict[str, Any], progress: Progress | None) -> None:
    """The code snapshot into the working folder, unless it is there already (content-addressed)."""
    destination = upload["destination"]
    there = shell.text(["bash", "-c", _SHA256, "cloudddp-sha256", destination], timeout=600).strip()
    if there == upload["sha256"]:
        if progress:
            progress.step(f"code snapshot {upload['sha256'][:12]} is on the cluster already: nothing to copy")
        return
    if there and progress:  # same name, other bytes: a torn copy, or one planted by someone else
        progress.step(f"{destination} on the cluster is not snapshot {upload['sha256'][:12]}: replacing it")
    if progress:
        progress.step(
            f"copying code snapshot {upload['sha256'][:12]} ({human_bytes(upload['bytes'])}) to {destination}"
        )
    with open(packed(upload), "rb") as archive:
        shell.write(destination, archive)


def cancel(info: SlurmRunInfo) -> None:
    """``scancel``: SIGTERM to every process, SIGKILL KillWait later; waits (KillWait and a little more) until
    Slurm says the job no longer runs."""
    shell = info.shell
    shell.run(["scancel", *on_cluster(info.cluster), info.job_id])
    deadline = time.monotonic() + float(info.kill_wait) + 15
    while time.monotonic() < deadline:
        job = job_record(shell, info.job_id, cluster=info.cluster)
        if job is None or job.get("JobState") not in LIVE:
            return
        time.sleep(1)  # once a second: the controller answers every user
