"""The batch script's lines about the rendezvous store: who binds it (:mod:`cloudddp.backends.slurm.agent`'s
wrappers), where its address is written, and what each srun task exports to join it."""

from __future__ import annotations

import shlex
from typing import Protocol

from cloudddp.backends.slurm.agent import AGENT, PORT_TAKEN_EXIT, PORT_TAKEN_MARK, STORE, TAKEN
from cloudddp.backends.slurm.options import SlurmOptions


class StepShape(Protocol):
    """The training step's shape: how it is launched, on how many nodes, with how many processes each
    (:class:`cloudddp.backends.slurm.decide.SlurmDecision` has it)."""

    @property
    def launch(self) -> str: ...

    @property
    def nodes(self) -> int: ...

    @property
    def processes_per_node(self) -> int: ...


def endpoint_lines(step: StepShape, run_dir: str) -> list[str]:
    """Where the rendezvous is: node 0's torchrun agent, or rank 0's task under srun, binds it and writes
    ``host:port`` into the run folder (cloudddp/backends/slurm/agent.py); an earlier run's file is removed first."""
    if not hosts_store(step):
        return []
    wrapper = AGENT if step.launch == "torchrun" else STORE
    return [
        "# The rendezvous: node 0 binds a port nobody could know before (or slurm.rendezvous_port) and writes",
        "# host:port here; every other process joins only the address read from this file.",
        f'rdzv_file={shlex.quote(run_dir)}/.cloudddp-rendezvous; rm -f "$rdzv_file"',
        f"rdzv_wrapper={shlex.quote(wrapper)}",
    ]


def taken_lines(step: StepShape, opts: SlurmOptions) -> list[str]:
    """A line in the batch log when a site's fixed rendezvous port was taken (status reads it)."""
    if not opts.rendezvous_port or not hosts_store(step):
        return []
    return [
        f'[ "$(cat "$rdzv_file" 2>/dev/null)" = {TAKEN} ] && echo "{PORT_TAKEN_MARK} {opts.rendezvous_port} '
        '(slurm.rendezvous_port) was taken on $first: nothing joined it, and the run ended"'
    ]


def task_lines(step: StepShape, opts: SlurmOptions, python: str) -> list[str]:
    """Each srun task (one training process): the distributed variables from SLURM_*, and where the store is.
    Rank 0 first starts the store on a socket it binds (it lives as long as this task) and prints where; every
    other rank reads that from the file. A job of one process needs no store of ours: torch's own binds a port the
    kernel picks, on loopback, and nobody else joins (torch need not be in slurm.python then)."""
    q = shlex.quote
    if hosts_store(step):
        endpoint = [
            'if [ "$SLURM_PROCID" = 0 ]; then',
            f'  read -r endpoint < <({q(python)} -c "$wrapper" "$rdzv_file" "$rdzv_host" {opts.rendezvous_port or 0} '
            "serve $$)",
            "else",
            f'  endpoint=$({q(python)} -c "$wrapper" "$rdzv_file" "" 0 read) || exit $?',
            "fi",
            f'case $endpoint in *:*) ;; *) [ "$(cat "$rdzv_file" 2>/dev/null)" = {TAKEN} ] && exit {PORT_TAKEN_EXIT}; '
            "exit 1;; esac",
            "export MASTER_ADDR=${endpoint%:*} MASTER_PORT=${endpoint##*:} TORCHELASTIC_USE_AGENT_STORE=True",
        ]
    else:
        endpoint = ["export MASTER_ADDR=127.0.0.1 MASTER_PORT=0"]
    return [
        "# One Slurm task per training process ($1 the rendezvous host, $2 the nodes, $3 the store's wrapper, $4",
        "# the file where rank 0's task writes the store's address).",
        "per_node='",
        "rdzv_host=$1; wrapper=$3; rdzv_file=$4; shift 4",
        *endpoint,
        "export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS GROUP_RANK=$SLURM_NODEID",
        f"export LOCAL_WORLD_SIZE={step.processes_per_node}",
        'echo "cloudddp: rank $RANK of $WORLD_SIZE (local rank $LOCAL_RANK)"',
        'exec "$@"',
        "'",
    ]


def hosts_store(step: StepShape) -> bool:
    """Whether a process of ours binds the rendezvous store: torchrun's agent always; under srun, unless the job
    is one process."""
    return step.launch == "torchrun" or step.nodes * step.processes_per_node > 1
