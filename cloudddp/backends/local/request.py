"""What a local plan hands to launch and to its supervisor: the torchrun agents to start and the run's limits.

The plan's JSON (``render --json``, the run folder's ``plan.json``) holds :meth:`LocalRequest.to_dict`; launch, the
supervisor and the run folder read it back typed (:meth:`LocalRequest.from_dict`), never by string key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cloudddp.plan import JsonDataclass


@dataclass(frozen=True)
class NodeCommand(JsonDataclass):
    """One torchrun agent (a "node" on this machine): what it runs and what it adds to the job's environment."""

    node_rank: int
    argv: tuple[str, ...]
    env: dict[str, str]


@dataclass(frozen=True, kw_only=True)
class LocalRequest(JsonDataclass):
    """A local run: the agents, where they run, the job's environment (secrets as placeholders) and its limits.
    Late values (``{RUN_DIR}``, ``{PORT}``, ``{PYTHON}``) stay placeholders until launch binds them. The fields with
    a default came later than the others: a run folder written before them still reads (a supervisor that adopts
    a run started by an earlier version)."""

    cwd: str
    """Where the processes run: the code snapshot, unpacked in the run folder."""
    device: Literal["cpu", "cuda"]
    nnodes: int
    nproc_per_node: int
    max_runtime: int
    """Seconds; the supervisor stops the nodes after this."""
    stall_timeout: int | None = None
    """Seconds without a line from any rank before the run fails as stalled; None: the watchdog is off."""
    rendezvous_port: str
    """The port of the rendezvous store the supervisor hosts on 127.0.0.1 (``{PORT}`` until launch)."""
    env: dict[str, str]
    nodes: tuple[NodeCommand, ...]
    requirements: tuple[str, ...] = ()
    """The job's requirement lines: launch finds (or makes) a Python that has them."""
    own_script: bool = False
    """A script other than the shared one: launch notes the snapshot's files, to name what it leaves in its
    working folder."""
    keep_files: tuple[str, ...] = ()
    """``checkpoint.files``: linked into the checkpoint folder by the supervisor."""
    arguments: tuple[str, ...] = ()
    """The spec's program and arguments, which launch records beside the checkpoints
    (:data:`cloudddp.backends.checkpoints.contents.RECORD`)."""
