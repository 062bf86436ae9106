"""What the run record keeps about a Slurm run: the typed form of the info launch records, read back by status,
logs and cancel.

The keys are the ones every version has stored; a run recorded before ``status_every`` existed reads with its
default. The base class and the runner keep their own keys in the same info (metrics, estimate, the recovery
chain, ...): :meth:`~cloudddp.plan.JsonDataclass.from_fields` reads this record from among them.
"""

from __future__ import annotations

from dataclasses import dataclass

from cloudddp.backends.slurm.request import DEFAULT_STATUS_EVERY, Launcher
from cloudddp.backends.slurm.shell import Shell
from cloudddp.plan import JsonDataclass


@dataclass(frozen=True, kw_only=True)
class SlurmRunInfo(JsonDataclass):
    """How to find a run again (its Slurm job, through which shell) and read its logs."""

    login_host: str | None = None
    ssh_options: tuple[str, ...] = ()
    name: str
    """The job's name (the spec's ``name``)."""
    run_dir: str
    batch_log: str
    node_logs: tuple[str, ...]
    nodes: int
    processes_per_node: int
    launch: Launcher
    kill_wait: int
    status_every: int = DEFAULT_STATUS_EVERY
    job_id: str
    cluster: str | None = None
    """The cluster sbatch put the job on when it was given ``--clusters`` (its ``--parsable`` answer ``id;name``):
    every later command names it (``-M``)."""

    @property
    def shell(self) -> Shell:
        """Where the run's Slurm commands run."""
        return Shell(self.login_host, self.ssh_options)
