"""A local run's record: its run folder's ``status.json``, typed.

The file is written a few keys at a time as the run goes (launch, the supervisor as it starts the nodes, a
supervisor that adopts them, cancel, the end), by :meth:`~cloudddp.backends.local.rundir.RunDir.write_status`, which
refuses a key this record does not have; it holds only the keys written so far. So every field has a default: the
value of a key not written yet, or not written by the version that started the run. Other tools and the tests read
the file as JSON: its keys are these fields' names.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from cloudddp.backends.procs import Process
from cloudddp.backends.status import RunState
from cloudddp.plan import JsonDataclass


@dataclass(frozen=True, kw_only=True)
class LocalRunStatus(JsonDataclass):
    """What ``status.json`` says of a run. Process ids come with their records (``{"start", "boot"}``,
    :meth:`~cloudddp.backends.procs.Process.record`): only a process that still matches its record is signalled."""

    # -- written by launch, before and after it starts the supervisor
    state: str | None = None
    """A :class:`~cloudddp.backends.status.RunState`'s value: ``starting`` from launch, ``running`` once the nodes
    started, the end state at the end; None only in a file that is missing or damaged."""
    name: str | None = None
    """The job's name."""
    nodes: int = 1
    """How many torchrun agents (simulated nodes) the run has."""
    created_at: float | None = None
    supervisor_pid: int | None = None
    """Written (with ``supervisor``) once the supervisor is started, and again by one that adopts the run: None
    while the run is still being launched."""
    supervisor: dict[str, Any] | None = None
    """The supervisor's process record; None (written) when it was gone before its start time could be read."""

    # -- written by the supervisor as it starts the nodes
    store_pid: int | None = None
    store: dict[str, Any] | None = None
    """The rendezvous store's process record."""
    started_at: float | None = None
    """When the nodes started: the runtime limit and the held time count from here."""
    node_pgids: tuple[int, ...] = ()
    """Each torchrun agent's pid, the leader of the node's process group."""
    node_processes: tuple[dict[str, Any], ...] = ()
    """Each agent's process record, in the order of ``node_pgids``."""

    # -- written by a supervisor that adopts the run, and by cancel
    adopted_at: float | None = None
    cancel_requested: bool = False

    # -- written when the run ends
    message: str = ""
    ended_at: float | None = None
    exit_codes: tuple[int, ...] | None = None
    """Each agent's exit code (:data:`~cloudddp.backends.local.nodes.LOST_CODE` for one that left none)."""
    cause: str | None = None
    """A :class:`~cloudddp.backends.status.Cause`'s value, for a run that did not succeed."""
    failure: dict[str, Any] | None = None
    """Which rank or node failed and the tail of its log (:func:`~cloudddp.backends.local.outcome.failure`)."""
    cpu_s: float | None = None
    """User + system CPU time of the run's processes; only the supervisor that started the nodes knows it."""
    adopted: bool = False
    """The run was ended by a supervisor that adopted it."""

    @property
    def run_state(self) -> RunState:
        return RunState(self.state) if self.state is not None else RunState.UNKNOWN

    def supervisor_process(self) -> Process | None:
        return Process.from_record(self.supervisor_pid, self.supervisor)

    def store_process(self) -> Process | None:
        return Process.from_record(self.store_pid, self.store)

    def node_groups(self) -> list[Process | None]:
        """Each node's agent, the leader of its process group (None where its record names no process)."""
        return [Process.from_record(p, r) for p, r in zip(self.node_pgids, self.node_processes, strict=False)]

    def updated(self, **changes: Any) -> LocalRunStatus:
        """This record with ``changes`` (status.json's keys and JSON values), checked as a write is."""
        return LocalRunStatus.from_dict({**self.to_dict(), **checked(changes)})

    def details(self) -> dict[str, Any]:
        """What a run's status shows of the end (``RunStatus.details``): the keys that were written."""
        shown = {"exit_codes": self.exit_codes, "failure": self.failure}
        return {k: list(v) if isinstance(v, tuple) else v for k, v in shown.items() if v is not None}


_KEYS = frozenset(f.name for f in fields(LocalRunStatus))


def checked(changes: dict[str, Any]) -> dict[str, Any]:
    """``changes`` to status.json, refused when one names a key the record does not have (a misspelt key is a bug)
    or has a value of the wrong type."""
    unknown = sorted(set(changes) - _KEYS)
    if unknown:
        raise TypeError(f"status.json has no key {', '.join(map(repr, unknown))}")
    LocalRunStatus.from_dict(changes)
    return changes


def parsed(data: object) -> LocalRunStatus:
    """The record from the file's JSON; the all-defaults record for a damaged one. A key this version does not know
    (written by a later one) is left alone."""
    if not isinstance(data, dict):
        return LocalRunStatus()
    try:
        return LocalRunStatus.from_fields(data)
    except ValueError:  # a value of the wrong type: pydantic's ValidationError
        return LocalRunStatus()
