"""A Slurm run's status: Slurm's record of its job (``scontrol show job``, then ``sacct``) as a RunStatus, asked
at most once per ``slurm.status_every`` seconds per run (longer while the job waits in the queue unchanged).

What a status says beyond Slurm's state comes from the run's own files: why each requeued run stopped (the
batch log), and for a failed run, which node and rank failed and the end of that node's log.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from cloudddp.backends.slurm.answers import (
    SACCT_FIELDS,
    STATES,
    TIME_FORMAT,
    failure,
    from_ended,
    from_sacct,
    held,
    parse_pairs,
    requeue_reasons,
    timestamp,
)
from cloudddp.backends.slurm.record import SlurmRunInfo
from cloudddp.backends.slurm.script import ENDED_FILE
from cloudddp.backends.slurm.shell import Shell, on_cluster
from cloudddp.backends.status import Cause, RunState, RunStatus
from cloudddp.backends.torchrun import failed_rank
from cloudddp.backends.verdicts import cause_of, concluded

BACKOFF = 1.5
"""While a queued job's answer does not change, each wait is this much longer than the last ..."""
MAX_BACKOFF = 6
"""... up to this many times slurm.status_every."""
LOG_TAIL = 65536
"""How much of a log's end is read for what it says about a requeue or a failure."""


def job_record(
    shell: Shell, job_id: str, run_dir: str | None = None, cluster: str | None = None
) -> dict[str, str] | None:
    """Slurm's record of the job: scontrol while slurmctld remembers it, else accounting (or jobcomp), else the end
    the batch script recorded in ``run_dir`` (a cluster without accounting the user may read forgets a finished
    job after MinJobAge). Times come with their zone (:data:`TIME_FORMAT`), so they read right wherever this
    machine is. A requeued job's restarts are its accounting rows less one."""
    zoned, on = ["env", f"SLURM_TIME_FORMAT={TIME_FORMAT}"], on_cluster(cluster)
    shown = shell.run([*zoned, "scontrol", *on, "-o", "show", "job", job_id], check=False)
    lines = shown.stdout.decode(errors="replace").splitlines()
    if shown.returncode == 0 and lines:
        return parse_pairs(lines[0])
    for completion in ([], ["--completion"]):
        asked = [*zoned, "sacct", *on, *completion, "-j", job_id, "-n", "-P", "-o", SACCT_FIELDS]
        listed = shell.run(asked, check=False)
        rows = [r for r in listed.stdout.decode(errors="replace").splitlines() if r.split("|")[0] == job_id]
        if listed.returncode == 0 and rows:  # a requeued job has a row per run: the last is the latest
            return {**from_sacct(rows[-1]), "Restarts": str(len(rows) - 1)}
    return from_ended(shell.tail(f"{run_dir}/{ENDED_FILE}", 4096)) if run_dir else None


@dataclasses.dataclass(frozen=True)
class _Seen:
    """The last status Slurm gave for a run, and when it may be asked again."""

    status: RunStatus
    due: float
    wait: float


class Polls:
    """The last answer for each run this backend object asked about, so that Slurm's controller is asked at
    most once per ``slurm.status_every`` seconds per run; while the job waits in the queue unchanged, the
    wait grows."""

    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}

    def status(self, run_id: str, every: float, ask: Callable[[], RunStatus]) -> RunStatus:
        """The remembered status of ``run_id`` while it is fresh (or final), else ``ask()``'s."""
        now = time.monotonic()
        seen = self._seen.get(run_id)
        if seen is not None and (seen.status.state.terminal or now < seen.due):
            return seen.status
        status = ask()
        every = max(1.0, float(every))
        same = seen is not None and (seen.status.state, seen.status.message) == (status.state, status.message)
        wait = (
            min(seen.wait * BACKOFF, every * MAX_BACKOFF)
            if same and seen and status.state is RunState.PENDING
            else every
        )
        self._seen[run_id] = _Seen(status, time.monotonic() + wait, wait)
        return status

    def forget(self, run_id: str) -> None:
        """Ask Slurm next time (the run was just told to stop)."""
        self._seen.pop(run_id, None)


def current_status(backend: str, run_id: str, info: SlurmRunInfo) -> RunStatus:
    """The run's status as Slurm tells it now."""
    shell = info.shell
    job = job_record(shell, info.job_id, info.run_dir, info.cluster)
    details: dict[str, Any] = {"job_id": info.job_id, "run_dir": info.run_dir}
    if job is None:
        return RunStatus(
            run_id,
            backend,
            RunState.UNKNOWN,
            name=info.name,
            details=details,
            message=f"Slurm no longer knows job {info.job_id} (no accounting record, and the run folder records no "
            "end: its batch script never finished)",
        )
    native = job.get("JobState", "")
    state = STATES.get(native, RunState.UNKNOWN)
    restarts = int(job.get("Restarts", "0") or 0)
    details.update(
        nodes=job.get("NodeList"), exit_code=job.get("ExitCode"), reason=job.get("Reason"), restarts=restarts
    )
    message, cause = _said(state, native, job, shell, info, details)
    return RunStatus(
        run_id=run_id,
        backend=backend,
        state=state,
        name=info.name,
        native_state=native,
        message=message,
        created_at=timestamp(job.get("SubmitTime")),
        ended_at=timestamp(job.get("EndTime")) if state.terminal else None,
        details=details,
        cause=cause,
    )


def _said(
    state: RunState, native: str, job: dict[str, str], shell: Shell, info: SlurmRunInfo, details: dict[str, Any]
) -> tuple[str, Cause | None]:
    """The status's message and cause; what it found on the way goes into ``details``."""
    restarts = details["restarts"]
    requeues = ""
    if restarts:  # why each earlier run stopped (a preemption, a chain's time limit, a node failure)
        reasons = requeue_reasons(shell.tail(info.batch_log, LOG_TAIL))[:restarts]
        details["requeue_reasons"] = reasons
        requeues = _requeues(restarts, reasons)
    if state is RunState.PENDING:
        return _waiting(job, restarts, details), None
    if state in (RunState.RUNNING, RunState.STARTING):
        return f"running on {job.get('NodeList')}" + (f" (restart {restarts}; {requeues})" if restarts else ""), None
    if state is RunState.SUCCEEDED:
        return "finished" + (f" after {requeues}" if restarts else ""), None
    if state is RunState.CANCELLED:
        return "cancelled", Cause.CANCELLED
    if state is RunState.FAILED:
        found = failure(job, shell.tail(info.batch_log, LOG_TAIL), tasks_are_ranks=info.launch == "srun")
        job_said = _concluded(shell, info) if found.cause is Cause.USER_ERROR else None
        if job_said is not None:
            details["failure"] = job_said
            cause, message = cause_of(job_said)
            return message, cause
        failed = details["failure"] = _failure_details(shell, info, found.node, found.task)
        return found.message + (
            f"; torchrun: rank {failed['rank']} failed first (exit code {failed.get('exitcode', '?')})"
            if "rank" in failed
            else ""
        ), found.cause
    return native.lower(), None


def _concluded(shell: Shell, info: SlurmRunInfo) -> dict[str, Any] | None:
    """What the job concluded, in the nodes' logs (:mod:`cloudddp.backends.verdicts`): a hang's verdict, whose
    culprit's host is the Slurm node name (``SLURMD_NODENAME``), or the interconnect pre-flight's refusal."""
    return concluded(line for path in info.node_logs for line in shell.tail(path, LOG_TAIL).splitlines())


def _waiting(job: dict[str, str], restarts: int, details: dict[str, Any]) -> str:
    """What a queued job's status says: the queue's reason, that it is held, that it was requeued and why."""
    message = f"waiting in the queue ({job.get('Reason', '?')})"
    on_hold = held(job)
    if on_hold:
        message, details["held"] = on_hold, True
    if restarts:
        why = details["requeue_reasons"][-1] if details["requeue_reasons"] else ""
        message = f"requeued{f' after {why}' if why else ''} (restart {restarts}); " + message
    return message


def _failure_details(shell: Shell, info: SlurmRunInfo, node: str | None, task: int | None) -> dict[str, Any]:
    """The failed node's log tail (and the rank torchrun names), for ``cloudddp status``."""
    found: dict[str, Any] = {"node": node}
    if task is None:
        return found
    index = task if info.launch == "torchrun" else task // max(1, info.processes_per_node)
    text = shell.tail(info.node_logs[min(index, len(info.node_logs) - 1)], LOG_TAIL)
    failed = failed_rank(text)
    found.update(task=task, node_index=index, **(dataclasses.asdict(failed) if failed else {}))
    found["log_tail"] = text.splitlines()[-20:]
    return found


def _requeues(restarts: int, reasons: list[str]) -> str:
    """``2 requeues: preemption, the partition's time limit ×1`` (reasons as the batch log tells them)."""
    counted = Counter(r or "not said" for r in reasons)
    said = ", ".join(f"{why} ×{n}" if n > 1 else why for why, n in counted.items())
    return f"{restarts} requeue{'s' if restarts > 1 else ''}" + (f": {said}" if said else "")
