"""What a Slurm plan asks for: the typed request render hands to launch (its JSON form is the plan's ``request``).

Slurm has no request document of its own (the sbatch script is the plan's document); this is what launch needs
besides the script: where the run's files go, how sbatch is called, what the job's environment carries from the
submitting shell, and what is decided only at submit (the requirements environment on the login node, CPUs per
task from the partition's nodes). Every field is read by attribute, so mypy sees a misspelt one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cloudddp.plan import JsonDataclass, Target

Launcher = Literal["torchrun", "srun"]
"""torchrun: one agent per node; srun: one Slurm task per training process."""
DEFAULT_STATUS_EVERY = 10
"""slurm.status_every for plans and runs recorded before it existed."""


@dataclass(frozen=True)
class SlurmTarget(Target):
    """Where a Slurm plan goes: Slurm's commands here, or on ``login_host`` through ssh; and the training's
    checkpoint folder on the cluster."""

    login_host: str | None = None
    ssh_options: tuple[str, ...] = ()
    checkpoints: str | None = None


@dataclass(frozen=True)
class LoginEnvironment(JsonDataclass):
    """The job's requirements environment, built (or checked) at submit where Slurm's commands run
    (``slurm.install_on: login``), before the job needs it."""

    folder: str
    key: str
    """What shapes the environment, hashed (:func:`cloudddp.backends.slurm.envs.key`)."""
    python: str
    modules: tuple[str, ...]
    setup: tuple[str, ...]


@dataclass(frozen=True)
class CpusAtSubmit(JsonDataclass):
    """What sbatch's ``--cpus-per-task`` is worked out from at submit, when ``slurm.cpus_per_process`` is not
    given: the partition's GPU nodes' CPUs shared among their GPUs, times the processes a Slurm task holds."""

    partition: str | None
    gpus_per_node: int
    per_task: int


@dataclass(frozen=True)
class SlurmRequest(JsonDataclass):
    """Everything launch does besides writing the script: where it goes, the folders it makes, how sbatch is
    called and with which environment, and what it records to find the run again."""

    run_id: str
    """The Slurm job's name: a retried launch finds its job by it instead of submitting another."""
    script_path: str
    sbatch: tuple[str, ...]
    workdir: str
    run_dir: str
    code_dir: str
    folders: tuple[str, ...]
    """Made before the job starts (its logs, the outputs, checkpoints and TensorBoard folders)."""
    batch_log: str
    node_logs: tuple[str, ...]
    nodes: int
    processes_per_node: int
    launch: Launcher
    kill_wait: int
    env: dict[str, str]
    """The job's environment, secrets and values read at submit as placeholders."""
    env_from_submit: tuple[str, ...]
    """Names whose values sbatch's environment carries (never the script)."""
    status_every: int = DEFAULT_STATUS_EVERY
    environment: LoginEnvironment | None = None
    """The requirements environment to build at submit; None when there is none, or the job builds it."""
    cpus_at_submit: CpusAtSubmit | None = None
    """None when the script says the CPUs per task already."""
    checkpoint_dir: str | None = None
    """The checkpoint folder, where submit records the run (:data:`cloudddp.backends.checkpoints.contents.RECORD`); None
    with checkpointing off."""
    arguments: tuple[str, ...] = ()
    """The spec's program and arguments, recorded there."""
    clusters: str | None = None
    """sbatch's ``--clusters`` (``-M``) from slurm.sbatch_options: the cluster(s) the job may go to."""
