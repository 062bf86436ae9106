"""The Slurm render's choices, made once: sizes and launcher, where things go, the environment, CPUs per task,
the time limit (one allocation or a chain), the requirements environment and the container image.

:func:`decide` refuses what Slurm cannot run as asked (a UserError naming the field) and asks the cluster nothing:
what only the cluster knows is decided at submit (the working folder when ``slurm.workdir`` is not given, named
by a placeholder until then: :mod:`.workdir`; CPUs per task when ``slurm.cpus_per_process`` is not) or checked by
the preflight. It only reads, for the plan's words, the checkpoint folder where it is known and this machine's
(:mod:`cloudddp.backends.checkpoints.contents`). The script, the request (:mod:`.build`) and the plan's lines
(:mod:`.explain`) are made from the :class:`SlurmDecision` alone.
"""

from __future__ import annotations

import math
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloudddp.backends.checkpoints import contents
from cloudddp.backends.slurm import envs, images, paths, workdir
from cloudddp.backends.slurm.layout import Layout
from cloudddp.backends.slurm.options import SlurmOptions
from cloudddp.backends.slurm.request import Launcher
from cloudddp.backends.slurm.shell import Shell
from cloudddp.code import requirements
from cloudddp.code.requirements import Requirements
from cloudddp.code.shipped import Snapshot
from cloudddp.errors import UserError
from cloudddp.plan import EnvSource
from cloudddp.runtime import (
    Places,
    Program,
    checked_snapshot,
    checkpoint_owner,
    job_env,
    program,
    program_words,
    snapshot_upload,
)
from cloudddp.spec.model import JobSpec, is_shared_script


@dataclass(frozen=True)
class SlurmDecision:
    """Every choice of a Slurm render."""

    options: SlurmOptions
    """The spec's ``slurm:`` section: the cluster's own words (partition, modules, setup, ...), as given."""
    job_name: str
    run_id: str
    """The Slurm job's name: the job's name and a token (``backend.token``, else the time and 16 random bits)."""
    shell: Shell
    layout: Layout
    workdir_origin: str
    """Where the working folder comes from: slurm.workdir, or the cluster's login shell at submit."""
    snapshot: Snapshot
    upload: dict[str, Any]
    """The plan's record of the code snapshot's upload into the working folder."""
    nodes: int
    processes_per_node: int
    gpus_per_node: int
    launch: Launcher
    """``distribution.launcher: mpi`` is srun's (one task per process); otherwise slurm.launch."""
    places: Places
    grace: int
    """Seconds between SIGTERM and SIGKILL the training is told (CLOUDDDP_SIGTERM_GRACE): the smaller of Slurm's
    two (:func:`graces`)."""
    env: dict[str, str]
    env_sources: dict[str, EnvSource]
    per_task: int
    """Training processes in one Slurm task: a node's under torchrun, one under srun."""
    cpus_per_process: int | None
    """None: decided at submit from the partition's GPU nodes."""
    time_minutes: int
    """One allocation's time limit (Slurm counts minutes)."""
    stop_lead: int
    """Seconds before the time limit the training is asked to checkpoint and stop."""
    budget_seconds: int | None
    """limits.max_runtime when it is longer than one allocation: the job runs as a chain of them."""
    requirements: Requirements | None
    requirements_env: str | None
    """Where the job's requirements are installed (an environment over slurm.python's packages), or None."""
    env_key: str
    """What shapes that environment, hashed (:func:`.envs.key`); "" without requirements."""
    image: str | None
    """The container image file every node runs (None: no container)."""
    program: Program
    arguments: tuple[str, ...]
    """The spec's program and arguments: recorded beside the checkpoints at submit."""
    checkpoint_owner: str
    """Why the checkpoint folder is this one (:func:`cloudddp.runtime.checkpoint_owner`)."""
    found: contents.Found | None
    """What the checkpoint folder holds, where Slurm's commands run on this machine and the folder is known at
    render (read then); None through ssh (the folder is the cluster's), in a working folder resolved at submit,
    or with checkpointing off."""
    never_resume: bool
    max_restarts: int
    keep_files: tuple[str, ...]
    """``checkpoint.files``: each rank's launcher links them into the checkpoint folder before the training starts;
    each node's first keeps a file within about a second of a rename into place, and all when the training ends."""
    fabric_unplaced: bool
    """Several GPU nodes want InfiniBand (resources.interconnect: auto) and nothing tells Slurm where it is."""
    accelerator_unsent: str | None
    """resources.accelerator, when nothing sends it to Slurm (no slurm.gpu_type or slurm.constraint)."""

    @property
    def on_gpu(self) -> bool:
        return self.gpus_per_node > 0

    @property
    def cpus_per_task(self) -> int | None:
        """CPUs of each Slurm task (slurm.cpus_per_process times the processes a task holds); None: decided at
        submit from the partition's nodes and given to sbatch's command line, and srun takes it from
        SLURM_CPUS_PER_TASK."""
        return self.cpus_per_process * self.per_task if self.cpus_per_process else None

    @property
    def env_from_submit(self) -> tuple[str, ...]:
        """Names whose values sbatch's environment carries (secrets, values read at submit): never in the script."""
        return tuple(self.env_sources)

    @property
    def late(self) -> tuple[str, ...]:
        """What the plan leaves to submit: the working folder, where ``slurm.workdir`` is not given."""
        return (workdir.LATE,) if self.layout.workdir == workdir.WORKDIR else ()

    @property
    def python(self) -> str:
        """The interpreter the training runs with: the requirements environment's, else slurm.python."""
        return f"{self.requirements_env}/bin/python" if self.requirements_env else self.options.python


def decide(spec: JobSpec, opts: SlurmOptions, *, token: str | None) -> SlurmDecision:
    """The choices for ``spec`` on the cluster ``opts`` names; the same UserErrors, in the same order, as each
    refused choice has always raised."""
    snapshot = checked_snapshot(spec)
    run_id = f"{spec.name}-{token or time.strftime('%y%m%d-%H%M%S') + '-' + secrets.token_hex(2)}"
    shell = Shell(opts.login_host, tuple(opts.ssh_options))
    folder, workdir_origin = workdir.planned(opts, shell)
    layout = Layout(folder, run_id)
    res = spec.resources
    launch: Launcher = "srun" if spec.distribution.launcher == "mpi" else opts.launch
    fabric_unplaced = _fabric_unplaced(spec, opts)
    places = paths.places(spec, opts, layout)
    minutes, budget = _allocation(spec, opts)
    stop_lead = min(opts.stop_before_limit, minutes * 60 // 2)
    grace = min(graces(opts).values())
    # torchrun's agent waits for its ranks as long as any stop lasts (a time-limit stop lasts stop_lead and more):
    # Slurm's own SIGKILL ends what overstays; the agent's would come first.
    longest = max(*graces(opts).values(), stop_lead)
    waits = {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(longest)} if launch == "torchrun" else {}
    env, sources = job_env(spec, "slurm", places, on_gpu=res.gpus_per_node > 0, sigterm_grace=grace, presets=waits)
    env["CLOUDDDP_RUN_ID"] = run_id
    per_task = res.processes if launch == "torchrun" else 1
    reqs = _requirements(spec, opts)
    env_key = envs.key(opts.python, opts.modules, opts.setup, reqs.text) if reqs else ""
    return SlurmDecision(
        options=opts,
        job_name=spec.name,
        run_id=run_id,
        shell=shell,
        layout=layout,
        workdir_origin=workdir_origin,
        snapshot=snapshot,
        upload=snapshot_upload(spec, snapshot, layout.archive(snapshot.sha256)),
        nodes=res.nodes,
        processes_per_node=res.processes,
        gpus_per_node=res.gpus_per_node,
        launch=launch,
        places=places,
        grace=grace,
        env=env,
        env_sources=sources,
        per_task=per_task,
        cpus_per_process=opts.cpus_per_process or (None if res.gpus_per_node > 0 else 1),
        time_minutes=minutes,
        stop_lead=stop_lead,
        budget_seconds=budget,
        requirements=reqs,
        requirements_env=envs.folder(layout.workdir, env_key) if reqs else None,
        env_key=env_key,
        image=images.image_file(opts.container, layout.workdir) if opts.container is not None else None,
        program=program(spec, places),
        arguments=program_words(spec),
        checkpoint_owner=checkpoint_owner(spec),
        found=_found(spec, opts, places),
        never_resume=spec.checkpoint.resume == "never",
        max_restarts=spec.limits.max_restarts,
        keep_files=tuple(spec.checkpoint.files),
        fabric_unplaced=fabric_unplaced,
        accelerator_unsent=res.accelerator if res.accelerator and not (opts.gpu_type or opts.constraint) else None,
    )


def _found(spec: JobSpec, opts: SlurmOptions, places: Places) -> contents.Found | None:
    """The checkpoint folder's contents, read only where it is this machine's folder (no login host) and known
    (not in a working folder resolved at submit)."""
    if places.checkpoint_dir is None or opts.login_host is not None or workdir.WORKDIR in places.checkpoint_dir:
        return None
    folder = Path(places.checkpoint_dir)
    return contents.look(
        folder,
        shared_script=is_shared_script(spec),
        keeps=bool(spec.checkpoint.files),
        siblings=not (spec.checkpoint.path or spec.checkpoint.key),
        patterns=contents.patterns_given(spec),
    )


def graces(opts: SlurmOptions) -> dict[str, int]:
    """Slurm's seconds between SIGTERM and SIGKILL, by what sends the SIGTERM: a cancel, a requeue and the time
    limit give KillWait (``slurm.kill_wait``); a preemption gives the partition's GraceTime
    (``slurm.grace_time``; a GraceTime of 0 preempts at once, which gives KillWait)."""
    found = {"slurm.kill_wait": opts.kill_wait}
    if opts.grace_time:
        found["slurm.grace_time"] = opts.grace_time
    return found


def _fabric_unplaced(spec: JobSpec, opts: SlurmOptions) -> bool:
    """Whether the nodes want InfiniBand and nothing tells Slurm which nodes have it: cloudddp cannot see a
    cluster's fabric. Asked for outright (resources.interconnect: rdma), that is refused."""
    res = spec.resources
    rdma = res.interconnect == "rdma" or (res.interconnect == "auto" and res.nodes > 1 and res.gpus_per_node > 0)
    if not rdma or opts.constraint or opts.partition:
        return False
    if res.interconnect == "rdma":
        raise UserError(
            "resources.interconnect: rdma, but nothing tells Slurm to place the job on InfiniBand nodes",
            hint="set slurm.constraint (e.g. ib) or slurm.partition to where the cluster's InfiniBand nodes are",
        )
    return True


def _allocation(spec: JobSpec, opts: SlurmOptions) -> tuple[int, int | None]:
    """One allocation's time limit in minutes, and limits.max_runtime when it needs a chain of allocations
    (longer than slurm.partition_time_limit), which only requeues can run."""
    max_runtime = spec.limits.max_runtime
    if not (opts.partition_time_limit and opts.partition_time_limit < max_runtime):
        return math.ceil(max_runtime / 60), None
    if not opts.requeue:
        raise UserError(
            f"limits.max_runtime {max_runtime} s is longer than slurm.partition_time_limit "
            f"{opts.partition_time_limit} s, which needs requeues, and slurm.requeue is off",
            hint="set slurm.requeue: true, or limits.max_runtime within the partition's limit",
        )
    return max(1, opts.partition_time_limit // 60), max_runtime


def _requirements(spec: JobSpec, opts: SlurmOptions) -> Requirements | None:
    """The job's requirements, installed over slurm.python's packages; a container's image must hold them."""
    reqs = requirements.of(spec)
    if reqs is not None and opts.container is not None:
        raise UserError(
            f"{reqs.source}: with slurm.container the job runs in its image; install the requirements in the image",
            hint="or leave slurm.container out",
        )
    return reqs
