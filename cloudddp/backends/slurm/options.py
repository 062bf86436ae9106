"""The ``slurm:`` section of a job spec: what only a Slurm cluster needs.

cloudddp does not guess a cluster's hardware: partitions, constraints (an InfiniBand feature, say), GPU
type names and memory are the cluster's own words, given here and rendered as ``#SBATCH`` lines.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from cloudddp.backends.slurm import flags
from cloudddp.spec.model import Duration, Strict, empty_list

_TOKEN = re.compile(r"^[^\s'\"\\]+\Z")  # \Z: `$` also matches before a final newline
_MEMORY = re.compile(r"^[0-9]+[KMGT]?\Z")
_PATH = re.compile(r"/[\w.+=@/-]*\Z")
"""A workdir sbatch's ``#SBATCH --output=``/``--chdir=`` lines carry unchanged: no spaces or quotes (sbatch
splits the line there), no ``%`` (``--output`` expands %j, %n, ...), no ``$`` or ``#``; and that a container's
mount list can name: no ``,`` (it separates pyxis's ``--container-mounts`` and apptainer's ``--bind`` entries) or
``:`` (it separates a mount's source, target and flags)."""


class Container(Strict):
    """Run every training process in a container image on the nodes."""

    image: str = Field(
        description="Image: for pyxis an enroot URI (nvcr.io#nvidia/pytorch:24.05-py3), "
        "for Apptainer a .sif path or docker:// URI. A URI is imported once per reference by the job into "
        "<workdir>/images/ (.sqsh / .sif) and every node runs that file; a path is used as it is."
    )
    runtime: Literal["pyxis", "apptainer"] = Field(
        "pyxis", description="pyxis: srun --container-image (NVIDIA's Slurm plugin); apptainer: apptainer exec."
    )
    mounts: list[str] = Field(
        default_factory=empty_list,
        description="More host folders the container sees (host[:container]); the working "
        "folder and the inputs are mounted already.",
    )

    @field_validator("image")
    @classmethod
    def _one_token(cls, v: str) -> str:
        return _token(v)


class SlurmOptions(Strict):
    """Only the Slurm backend reads this."""

    login_host: str | None = Field(
        None,
        description="Submit through `ssh <login_host>` (BatchMode; your ssh config and agent apply). "
        "Default: Slurm's commands run on this machine.",
    )
    ssh_options: list[str] = Field(default_factory=empty_list, description="Extra ssh arguments, e.g. [-p, '2222'].")
    workdir: str | None = Field(
        None,
        description="A folder every node sees (shared filesystem): code snapshots, run folders, environments, "
        "images, checkpoints. Default: the cluster's own, as its login shell sets it at submit: "
        "$CLOUDDDP_SLURM_WORKDIR, else $SCRATCH/cloudddp, else $WORK/cloudddp; else $CLOUDDDP_HOME/slurm here "
        "(required with login_host).",
    )
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = Field(
        None, description="Node features, e.g. 'ib' for an InfiniBand island (the cluster's own feature names)."
    )
    exclusive: bool = Field(False, description="Whole nodes for this job (#SBATCH --exclusive).")
    requeue: bool = Field(
        True, description="A preempted or failed-node job goes back to the queue and resumes from its checkpoint."
    )
    gpu_option: Literal["gpus-per-node", "gres"] = Field(
        "gpus-per-node", description="How GPUs are asked for: --gpus-per-node=N or --gres=gpu:N (older clusters)."
    )
    gpu_type: str | None = Field(None, description="The cluster's GRES type name, e.g. a100 (--gpus-per-node=a100:8).")
    cpus_per_process: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="CPUs for each training process (its data loaders included), whatever slurm.launch: "
        "srun and sbatch get --cpus-per-task of this times the processes a task holds (all of a node's under "
        "torchrun, one under srun). Default: at submit, the node's CPUs shared among its GPUs "
        "(CPUs / GPUs of the partition's smallest node), or 1 per process without GPUs.",
    )
    mem: str | None = Field(None, description="Memory per node in Slurm's words: 64G, 500000M, 0 (all of it).")
    launch: Literal["torchrun", "srun"] = Field(
        "torchrun",
        description="torchrun: one agent per node with a c10d rendezvous (restarts work); srun: one "
        "Slurm task per process, distributed variables from SLURM_*.",
    )
    python: str = Field("python3", description="The interpreter on the nodes (after modules and setup).")
    modules: list[str] = Field(default_factory=empty_list, description="Environment modules to load, e.g. [cuda/12.4].")
    setup: list[str] = Field(
        default_factory=empty_list, description="Shell lines run before training, e.g. ['source ~/venv/bin/activate']."
    )
    install_on: Literal["login", "job"] = Field(
        "login",
        description="Where the job's requirements are installed. login: by cloudddp at submit, on the machine "
        "it runs Slurm's commands on (this one or slurm.login_host), under a lock: compute nodes need no "
        "network. job: by the job on its first node (when login and compute nodes differ, e.g. in CPU type).",
    )
    container: Container | None = None
    kill_wait: int = Field(
        30,
        ge=1,
        le=65535,
        description="The cluster's KillWait: seconds between SIGTERM and SIGKILL (`scontrol show config`).",
    )
    grace_time: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="The partition's GraceTime when it is preemptible (`scontrol show partition`): seconds between "
        "a preemption's SIGTERM and its SIGKILL. The script is told the smaller of this and slurm.kill_wait "
        "(CLOUDDDP_SIGTERM_GRACE). Default: the job is not preempted with a grace time (0 counts as none: Slurm "
        "then requeues at once, giving KillWait).",
    )
    stop_before_limit: Duration = Field(
        180,
        le=65535,
        description="How long before the time limit (limits.max_runtime) the training is asked to checkpoint "
        "and stop; Slurm's timer may fire up to a minute late. At most 65535 s (sbatch --signal's limit).",
    )
    status_every: Duration = Field(
        10,
        le=3600,
        description="Seconds between questions to Slurm's controller (scontrol, squeue) about one run; while "
        "nothing changes the wait grows (x1.5 per unchanged answer) up to 6 times this. Logs are read on their "
        "own, without asking the controller.",
    )
    partition_time_limit: Duration | None = Field(
        None,
        description="The partition's time limit (MaxTime in `scontrol show partition`, e.g. 24h). A longer "
        "limits.max_runtime runs as a chain of allocations this long: each checkpoints at its warning signal "
        "and the job is requeued for the rest. Default: one allocation of limits.max_runtime.",
    )
    rendezvous_port: int | None = Field(
        None,
        ge=1024,
        le=65535,
        description="Port on the first node for the rendezvous store, bound by node 0's torchrun agent (srun: by "
        "rank 0's task) before anything joins it (taken: the run fails as an infrastructure failure); default: a "
        "port the kernel picks.",
    )
    sbatch_options: list[str] = Field(
        default_factory=empty_list,
        description="More #SBATCH options as written, e.g. [--reservation=ml, --mail-type=END].",
    )

    @field_validator("partition", "account", "qos", "constraint", "gpu_type", "login_host", "python")
    @classmethod
    def _single_token(cls, v: str | None) -> str | None:
        return None if v is None else _token(v)

    @field_validator("mem", mode="before")
    @classmethod
    def _memory(cls, v: object) -> object:
        if isinstance(v, int) and not isinstance(v, bool):
            v = str(v)  # `mem: 0` in YAML
        if isinstance(v, str) and not _MEMORY.match(v):
            raise ValueError("write memory as Slurm does: a number with K, M, G or T (64G), or 0 for all of it")
        return v

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, v: str | None) -> str | None:
        return None if v is None else checked_workdir(v)

    @field_validator("sbatch_options")
    @classmethod
    def _as_sbatch_reads_them(cls, v: list[str]) -> list[str]:
        return flags.normalize(v)


def checked_workdir(v: str) -> str:
    """``v`` as a working folder (no trailing slash); ValueError says what it may not hold and why."""
    if not v.startswith("/"):
        raise ValueError("give an absolute path on the cluster's shared filesystem")
    if not _PATH.match(v):
        bad = sorted({c for c in v if not re.match(r"[\w.+=@/-]", c)})
        raise ValueError(
            f"{' '.join(repr(c) for c in bad)} in the path: sbatch's #SBATCH lines cannot carry it (spaces and "
            "quotes split the line, % is a file-name pattern) and container mounts cannot (, separates them, : "
            "a mount's parts); use a folder whose path has only letters, digits and . _ - + = @ /"
        )
    return v.rstrip("/") or "/"


def _token(v: str) -> str:
    if not _TOKEN.match(v):
        raise ValueError("one word without spaces or quotes, as Slurm's commands take it")
    return v
