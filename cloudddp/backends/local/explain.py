"""A local plan's decision lines and warnings, in words, from the render's :class:`LocalDecision`."""

from __future__ import annotations

from cloudddp.backends.checkpoints import contents
from cloudddp.backends.folderlock import LOCK_NAME
from cloudddp.backends.local.decide import LocalDecision
from cloudddp.code.shipped import snapshot_warnings
from cloudddp.observe.units import human_bytes

LOCK_NOTE = f"a second copy of the training refuses to start while this one runs: {LOCK_NAME} in the folder"


def explain(d: LocalDecision) -> tuple[list[str], list[str]]:
    """The plan's decisions and warnings, in the order the plan has always shown them."""
    decisions = [
        f"runs code snapshot {d.snapshot.sha256[:12]} ({len(d.snapshot.files)} files, "
        f"{human_bytes(d.snapshot.size)}) unpacked in the run folder: the bytes a cloud job gets",
        f"{d.nodes} node(s) × {d.processes_per_node} process(es) on {d.device}, process group {d.process_group}",
    ]
    if d.estimate is not None:
        decisions.append(
            f"estimate: {d.estimate.training_s:,.0f} s of training ({d.estimate.steps:,.0f} steps "
            f"of {d.estimate.step_s:.4g} s; step time from {d.estimate.step_basis})"
        )
    if d.cloud_nodes > 1 and d.nodes == 1:
        decisions.append(
            f"resources.nodes={d.cloud_nodes} is for the cloud; here 1 node "
            "(set local.nodes to run several torchrun nodes on this machine)"
        )
    if d.checkpoints is not None:
        c = d.checkpoints
        decisions.append(
            f"checkpoints in {c.folder} ({c.owner}): {contents.resume_note(c.found, never=c.never_resume)}; "
            f"held by one run at a time ({LOCK_NOTE})"
        )
    decisions.append(_stall_note(d))
    if d.requirements is not None:
        decisions.append(
            f"requirements ({len(d.requirements.lines)} from {d.requirements.source}): run in this Python if it has "
            f"them, else in an environment made for them ({d.requirements_env})"
        )
    if d.max_restarts:
        decisions.append(
            f"limits.max_restarts {d.max_restarts}: each restart of the processes starts with a store "
            "of its own, bound on 127.0.0.1 by the rank-0 agent before its port is known, so none reads the last "
            "attempt's addresses"
        )
    decisions.append(
        f"a stop (cancel, limits.max_runtime): each rank's program gets SIGTERM once, from cloudddp's rank launcher "
        f"(never its DataLoader workers), then {d.env['CLOUDDDP_SIGTERM_GRACE']} s to save before SIGKILL"
    )
    return decisions, _warnings(d)


def _warnings(d: LocalDecision) -> list[str]:
    warnings = snapshot_warnings(d.snapshot)
    if d.checkpoints is not None and not d.checkpoints.never_resume:
        differ = contents.arguments_warning(d.checkpoints.found, d.arguments)
        warnings += [differ] if differ else []
    if d.device == "cpu" and d.gpus_asked:
        warnings.append(
            f"resources.gpus_per_node is {d.gpus_asked} but the run trains on the CPU here (no NVIDIA GPU on this "
            f"machine, or local.device: cpu), {d.processes_per_node} process(es) per node: a rehearsal of the "
            "job's code and collectives, not of its speed; a cloud or Slurm backend gives it the GPUs"
        )
    if d.nccl_without_cuda:
        warnings.append("distribution.backend nccl needs CUDA; this machine has none, so gloo is used here")
    processes = d.processes_per_node * d.nodes
    if d.device == "cpu" and processes > d.cores:
        warnings.append(
            f"{processes} processes on {d.cores} CPU cores: oversubscribed ranks slow every collective; "
            "lower local.processes_per_node or local.nodes"
        )
    return warnings


def _stall_note(d: LocalDecision) -> str:
    if d.stall_seconds is None:
        return "stall watchdog off (limits.stall_timeout: off): a hung rank runs until limits.max_runtime"
    return (
        f"stall watchdog: no line from any rank for {d.stall_seconds} s ({d.stall_basis}) fails the run as stalled, "
        "with every rank's Python stack in the log and in `cloudddp status`"
    )
