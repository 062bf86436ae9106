"""Reading Slurm's answers: ``scontrol -o show job`` and ``sacct`` records, job states as cloudddp's, and what a
failed run's batch log says about which node failed and why (tests/support/SLURM.md lists what 22.05 prints).
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cloudddp.backends.slurm.agent import PORT_TAKEN_MARK
from cloudddp.backends.slurm.script import (
    CHAIN_MARK,
    LIMIT_EXIT,
    LIMIT_MARK,
    PREEMPT_MARK,
    PREEMPTED_EXIT,
    SAVED_MARK,
    START_MARK,
    UNSAVED_MARK,
)
from cloudddp.backends.status import Cause, RunState

_PAIR = re.compile(r"(\S+?)=(.*?)(?= \S+?=|$)")
_NODE_FAILURE = re.compile(r"srun: error: Node failure on (\S+)")
_PORT_TAKEN = re.compile(re.escape(PORT_TAKEN_MARK) + r" \d+ \(slurm\.rendezvous_port\) was taken on (\S+):")
_TASK_ERROR = re.compile(r"srun: error: (\S+): tasks? ([0-9,-]+): (.+)")
_CANCELLED_DUE = re.compile(r"\*\*\* JOB \d+ ON \S+ CANCELLED AT \S+ DUE TO ([A-Z ]+?) \*\*\*")
_GRES_GPUS = re.compile(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)")

SACCT_FIELDS = "JobID,State,ExitCode,NodeList,Submit,End"
"""The fields asked of ``sacct -o``, in the order :func:`from_sacct` reads them."""
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S%z"
"""SLURM_TIME_FORMAT for scontrol and sacct: the cluster's local time with its offset from UTC."""

STATES: Mapping[str, RunState] = {
    **dict.fromkeys(
        ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SPECIAL_EXIT", "SUSPENDED", "STOPPED", "RESV_DEL_HOLD"),
        RunState.PENDING,
    ),
    "CONFIGURING": RunState.STARTING,
    **dict.fromkeys(("RUNNING", "RESIZING", "SIGNALING", "STAGE_OUT"), RunState.RUNNING),
    "COMPLETING": RunState.STOPPING,
    "COMPLETED": RunState.SUCCEEDED,
    "CANCELLED": RunState.CANCELLED,
    **dict.fromkeys(
        ("FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED", "REVOKED"),
        RunState.FAILED,
    ),
}
LIVE = frozenset(name for name, state in STATES.items() if not state.terminal)
_ENDINGS = {
    "TIMEOUT": "Slurm's time limit (limits.max_runtime) ended it",
    "OUT_OF_MEMORY": "a process ran out of memory: raise slurm.mem",
    "BOOT_FAIL": "Slurm could not boot its nodes",
    "DEADLINE": "its deadline passed before it could run",
    "PREEMPTED": "the cluster preempted it (slurm.requeue: true puts a preempted job back in the queue)",
    "REVOKED": "the cluster revoked it",
}

_CAUSES = {
    "TIMEOUT": Cause.LIMIT,
    "DEADLINE": Cause.LIMIT,
    "OUT_OF_MEMORY": Cause.USER_ERROR,
    "BOOT_FAIL": Cause.INFRASTRUCTURE,
    "PREEMPTED": Cause.PREEMPTED,
}


def parse_pairs(line: str) -> dict[str, str]:
    """``Key=Value Key2=Value two`` (``scontrol -o``, jobcomp records) as a dict; values may hold spaces."""
    return {m.group(1): m.group(2) for m in _PAIR.finditer(line.strip())}


def from_sacct(line: str) -> dict[str, str]:
    """A ``sacct -P -o`` :data:`SACCT_FIELDS` row with scontrol's key names."""
    job_id, state, exit_code, nodes, submit, end = (line.split("|") + [""] * 6)[:6]
    return {
        "JobId": job_id,
        "JobState": state.split(" ")[0],
        "ExitCode": exit_code,
        "NodeList": nodes,
        "SubmitTime": submit,
        "EndTime": end,
        "Reason": "None",
        "Restarts": "0",
        "FromAccounting": "1",
    }


def from_ended(text: str) -> dict[str, str] | None:
    """The run folder's end record (``exit=N restarts=N slurm=STATE end=TIME``, written by the batch script as it
    exits) with scontrol's key names, or None when there is none. What Slurm was doing then decides: a job it was
    ending (a cancel, the time limit) is that; otherwise the script's exit code tells success from failure."""
    pairs = dict(word.split("=", 1) for word in text.split() if "=" in word)
    code = pairs.get("exit", "")
    if not code.isdigit():
        return None
    slurm = pairs.get("slurm", "RUNNING")
    if STATES.get(slurm, RunState.RUNNING).terminal:
        state = slurm
    elif slurm != "RUNNING":  # COMPLETING: Slurm was ending it (a cancel) as the script exited
        state = "CANCELLED"
    else:
        state = "COMPLETED" if code == "0" else "FAILED"
    return {
        "JobState": state,
        "ExitCode": f"{code}:0",
        "Restarts": pairs.get("restarts", "0"),
        "EndTime": pairs.get("end", ""),
        "Reason": "None",
        "FromRunFolder": "1",
    }


def timestamp(value: str | None) -> float | None:
    """A time Slurm printed in :data:`TIME_FORMAT` as epoch seconds (None for Unknown/None). One without an
    offset (a Slurm that ignored SLURM_TIME_FORMAT) is read in this machine's zone, the best left to do."""
    try:
        return datetime.datetime.strptime(value or "", TIME_FORMAT).timestamp()
    except ValueError:
        pass
    try:
        return time.mktime(time.strptime(value or "", "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


_HELD = {
    "launch failed requeued held": "Slurm could not start its batch script, tried again, and held it (the node's "
    "slurmd log says why)",
    "job_requeued_in_held_state": "it was requeued held (scontrol requeuehold)",
    "JobHeldUser": "its user held it (scontrol hold, sbatch --hold)",
    "JobHeldAdmin": "an administrator held it",
}


def held(job: Mapping[str, str]) -> str | None:
    """What a held job's status says: that it will not start by itself, why, and how to release it."""
    reason, state, job_id = job.get("Reason", ""), job.get("JobState", ""), job.get("JobId", "<job id>")
    if state == "SPECIAL_EXIT":
        why = "it exited with the cluster's special exit code and Slurm held it"
    elif reason in _HELD:
        why = _HELD[reason]
    elif state in ("REQUEUE_HOLD", "RESV_DEL_HOLD") or "held" in reason.lower():
        why = "Slurm holds it"
    else:
        return None
    return f"held ({reason or state}): {why}; it will not start until released: `scontrol release {job_id}`"


def cpus_per_gpu(sinfo: str, gpus_per_node: int) -> int | None:
    """Each GPU's share of its node's CPUs on the smallest node that has ``gpus_per_node`` GPUs, from
    ``sinfo -h -N -o "%c %G"`` lines (``64 gpu:a100:8(S:0-1)``); None when no node shows that many."""
    shares = []
    for line in sinfo.splitlines():
        cpus, _, gres = line.strip().partition(" ")
        gpus = sum(int(n) for n in _GRES_GPUS.findall(gres.strip()))
        if cpus.isdigit() and gpus and gpus >= gpus_per_node:
            shares.append(max(1, int(cpus) // gpus))
    return min(shares) if shares else None


def latest_run(batch_log: str) -> str:
    """The part of a batch log written by the job's latest run (a requeued job appends a run per start)."""
    at = batch_log.rfind(START_MARK)
    return batch_log[at:] if at >= 0 else batch_log


@dataclass
class Failure:
    """Why a run failed, from Slurm's record and the batch log's srun lines."""

    message: str
    cause: Cause
    node: str | None = None
    task: int | None = None
    details: dict[str, Any] = field(default_factory=dict)


def failure(job: Mapping[str, str], batch_log: str, *, tasks_are_ranks: bool = False) -> Failure:
    """What ended a FAILED/TIMEOUT/NODE_FAIL/... run, naming the node where Slurm says which one. A task is a
    node's torchrun agent, or a training process whose task id is its rank (``tasks_are_ranks``)."""
    state = job.get("JobState", "")
    exit_code = job.get("ExitCode", "")
    run = latest_run(batch_log)
    lost = _NODE_FAILURE.search(run)
    if state == "NODE_FAIL" or lost:
        node = lost.group(1) if lost else None
        where = f"node {node}" if node else "a node of the job"
        message = f"{where} failed: Slurm lost it mid-run (NODE_FAIL, Reason={job.get('Reason', '?')})"
        return Failure(message, Cause.INFRASTRUCTURE, node)
    if state == "FAILED" and exit_code.split(":")[0] == str(LIMIT_EXIT) and LIMIT_MARK in run:
        return Failure(
            "stopped ahead of limits.max_runtime: the training was asked to checkpoint and stop; " + _resumes(run),
            Cause.LIMIT,
        )
    if state == "FAILED" and exit_code.split(":")[0] == str(PREEMPTED_EXIT) and PREEMPT_MARK in run:
        return Failure(
            "the cluster preempted it after the training checkpointed, and it could not be requeued "
            "(slurm.requeue: true puts a preempted job back in the queue)",
            Cause.PREEMPTED,
        )
    if state in _ENDINGS:
        return Failure(_ENDINGS[state], _CAUSES.get(state, Cause.UNKNOWN))
    taken = _PORT_TAKEN.search(run)
    if taken:
        return Failure(
            f"slurm.rendezvous_port is taken on node {taken.group(1)}: another process listens there, and "
            "cloudddp joins no listener it did not bind (leave slurm.rendezvous_port unset: node 0 then binds a "
            "port the kernel picks)",
            Cause.INFRASTRUCTURE,
            taken.group(1),
        )
    task_error = _TASK_ERROR.search(run)
    if task_error:
        node, tasks, what = task_error.groups()
        first = int(re.split(r"[,-]", tasks)[0])
        who = f"rank {first}" if tasks_are_ranks else f"task {first}"
        return Failure(f"node {node} ({who}) failed: {what[0].lower()}{what[1:]}", Cause.USER_ERROR, node, first)
    code, _, signal = exit_code.partition(":")
    why = f"killed by signal {signal}" if signal not in ("", "0") else f"exit code {code or '?'}"
    return Failure(f"the job failed: {why} (Reason={job.get('Reason', '?')})", Cause.USER_ERROR)


def _resumes(run: str) -> str:
    """What a resubmit continues from, as the batch script saw the checkpoint folder when the training ended."""
    if SAVED_MARK in run:
        return "it wrote its checkpoint: submit again to continue from it"
    if UNSAVED_MARK in run:
        return (
            "it wrote nothing to its checkpoint folder in this run: a resubmit starts from the last earlier "
            "checkpoint, if any"
        )
    return "cloudddp cannot tell whether it checkpointed (no checkpoint folder): a resubmit starts from what it saved"


def requeue_reasons(batch_log: str) -> list[str]:
    """Why each interrupted run of the job stopped, oldest first ('' where its part of the log does not say):
    the script's own requeue after a preemption or at a chain's time limit, or Slurm's (a node failure,
    ``scontrol requeue``, a preemption without grace time). The latest run counts once it has stopped."""
    runs = batch_log.split(START_MARK)[1:]
    reasons = [_stop_reason(run) for run in runs[:-1]]
    last = _stop_reason(runs[-1]) if runs else ""
    return [*reasons, last] if last else reasons


def _stop_reason(run: str) -> str:
    if PREEMPT_MARK in run:
        return "preemption"
    if CHAIN_MARK in run:
        return "the partition's time limit (a chain of allocations)"
    found = [(m.start(), f"node failure on {m.group(1)}") for m in _NODE_FAILURE.finditer(run)]
    found += [(m.start(), m.group(1).lower()) for m in _CANCELLED_DUE.finditer(run)]
    return max(found)[1] if found else ""
