"""Every choice a local render makes, made once: the device, how many processes and nodes, the process group, where
things are, the environment, the checkpoint folder, the program and its Python, the requirements and the estimate.

:func:`decide` reads the spec and this machine and refuses what cannot run here (a remote checkpoint or output
folder) with the same errors as ever; ``build`` makes the request and ``torchrun.sh`` from the decision alone, and
``explain`` the plan's lines.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cloudddp.backends.checkpoints import contents
from cloudddp.backends.local.estimate import time_estimate
from cloudddp.backends.local.options import LocalOptions
from cloudddp.code import requirements
from cloudddp.code.requirements import Requirements
from cloudddp.code.shipped import Snapshot
from cloudddp.errors import UserError
from cloudddp.paths import home
from cloudddp.plan import EnvSource, Estimate, late
from cloudddp.runtime import (
    Places,
    checked_snapshot,
    checkpoint_folder,
    checkpoint_owner,
    job_env,
    program_words,
    snapshot_upload,
)
from cloudddp.runtime import program as runtime_program
from cloudddp.spec.model import JobSpec, is_shared_script

RUN_DIR, PORT, PYTHON = late("RUN_DIR"), late("PORT"), late("PYTHON")
CODE_DIR = f"{RUN_DIR}/code"
"""Where the code snapshot is unpacked in the run folder: the processes' working folder."""


@dataclass(frozen=True)
class Checkpoints:
    """Where the training's checkpoints are, why there, and what a run starts from."""

    folder: Path
    owner: str
    """Why this folder (:func:`cloudddp.runtime.checkpoint_owner`)."""
    found: contents.Found
    """What the folder holds now."""
    never_resume: bool
    """``checkpoint.resume: never``: the shared script and the kept files start from scratch."""


@dataclass(frozen=True)
class LocalDecision:
    """The choices of one local render; the request, ``torchrun.sh`` and the plan's lines are made from these."""

    snapshot: Snapshot
    upload: dict[str, Any]
    """The plan's record of the code snapshot, unpacked into :data:`CODE_DIR` at launch."""
    device: Literal["cpu", "cuda"]
    nodes: int
    processes_per_node: int
    cloud_nodes: int
    """``resources.nodes``: the cloud's count, which one node stands for here unless ``local.nodes`` says more."""
    cores: int
    process_group: str
    nccl_without_cuda: bool
    """``distribution.backend: nccl`` asked for on a machine without CUDA: gloo is used instead."""
    gpus_asked: int
    """``resources.gpus_per_node``: GPUs the job asks for, which this machine may not have."""
    estimate: Estimate | None
    places: Places
    checkpoints: Checkpoints | None
    """None when checkpointing is off."""
    env: dict[str, str]
    env_sources: dict[str, EnvSource]
    stall_seconds: int | None
    stall_basis: str
    program: tuple[str, ...]
    """What torchrun starts in each process: the job's program under the rank launcher of
    :mod:`cloudddp.injob.shim`, which passes a stop on to it once and keeps it from its DataLoader workers."""
    python: str
    """The Python that runs torchrun: this one, or ``{PYTHON}`` (bound at launch) where the job has requirements."""
    requirements: Requirements | None
    requirements_env: Path | None
    """The environment made for the requirements where this Python lacks them."""
    max_restarts: int
    max_runtime: int
    own_script: bool
    keep_files: tuple[str, ...]
    arguments: tuple[str, ...]
    """The spec's program and arguments: recorded beside the checkpoints at launch, compared with the last run's."""


RANK_LAUNCHER = ("-m", "cloudddp.injob.shim", "--cloudddp-00", "{}", "--")
"""What torchrun starts as each rank: cloudddp's rank launcher, which runs the program after ``--`` as its child."""


def decide(spec: JobSpec, opts: LocalOptions, *, backend: str, sigterm_grace: int) -> LocalDecision:
    """The choices for ``spec`` on this machine, each made once (in the order whose errors the user meets first)."""
    snapshot = checked_snapshot(spec)
    device = _device(spec, opts)
    nproc, nnodes = _processes_per_node(spec, opts, device), opts.nodes
    asked = spec.process_group_backend(on_gpu=device == "cuda")
    nccl_without_cuda = asked == "nccl" and device != "cuda"
    process_group = "gloo" if nccl_without_cuda else asked
    estimate = time_estimate(spec, device, nnodes, nproc)
    folder = checkpoint_dir(spec)
    places = _places(spec, folder, backend, nnodes, nproc)
    env, sources = job_env(spec, backend, places, on_gpu=device == "cuda", sigterm_grace=sigterm_grace)
    env["CLOUDDDP_DIST_BACKEND"] = process_group
    own_script = not is_shared_script(spec)
    checkpoints = _checkpoints(spec, folder, own_script=own_script) if spec.checkpoint.enabled else None
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    run = runtime_program(spec, places)
    reqs = requirements.of(spec)
    python = PYTHON if reqs else sys.executable
    return LocalDecision(
        snapshot=snapshot,
        upload=snapshot_upload(spec, snapshot, CODE_DIR),
        device=device,
        nodes=nnodes,
        processes_per_node=nproc,
        cloud_nodes=spec.resources.nodes,
        cores=os.cpu_count() or 1,
        process_group=process_group,
        nccl_without_cuda=nccl_without_cuda,
        gpus_asked=spec.resources.gpus_per_node,
        estimate=estimate,
        places=places,
        checkpoints=checkpoints,
        env=env,
        env_sources=sources,
        stall_seconds=spec.stall_seconds,
        stall_basis=(
            "limits.stall_timeout" if spec.limits.stall_timeout is not None else "twice distribution.collective_timeout"
        ),
        program=(*RANK_LAUNCHER, *([python] if run.python else []), *run.argv),
        python=python,
        requirements=reqs,
        requirements_env=home() / "envs" / reqs.digest if reqs else None,
        max_restarts=spec.limits.max_restarts,
        max_runtime=spec.limits.max_runtime,
        own_script=own_script,  # name the files it leaves in its working folder
        keep_files=tuple(spec.checkpoint.files),  # linked into the checkpoint folder by the supervisor
        arguments=program_words(spec),
    )


def _has_cuda_device() -> bool:
    """A cheap look for an NVIDIA device, without importing torch (render must stay light)."""
    return Path("/dev/nvidiactl").exists()


def _device(spec: JobSpec, opts: LocalOptions) -> Literal["cpu", "cuda"]:
    use_cuda = opts.device == "cuda" or (
        opts.device == "auto" and spec.resources.gpus_per_node > 0 and _has_cuda_device()
    )
    return "cuda" if use_cuda else "cpu"


def _processes_per_node(spec: JobSpec, opts: LocalOptions, device: str) -> int:
    # Without the GPUs here, two processes still exercise every collective the job will run.
    return (
        opts.processes_per_node
        or spec.resources.processes_per_node
        or (spec.resources.gpus_per_node if device == "cuda" else 2)
    )


def checkpoint_dir(spec: JobSpec) -> Path:
    """Checkpoints live per training (:func:`cloudddp.runtime.checkpoint_key`), so a resubmitted job resumes where
    the last run stopped, whatever its arguments or size."""
    if spec.checkpoint.path and "://" in spec.checkpoint.path:
        raise UserError(
            f"checkpoint.path: {spec.checkpoint.path} is remote; the local backend writes local folders",
            hint="give a folder (relative to the spec file), or leave checkpoint.path out",
        )
    return (spec.base_dir / checkpoint_folder(spec, str(home() / "checkpoints"))).resolve()


def _places(spec: JobSpec, checkpoints: Path, backend: str, nodes: int, processes_per_node: int) -> Places:
    return Places(
        model_dir=f"{RUN_DIR}/outputs",
        nodes=nodes,
        processes_per_node=processes_per_node,
        tensorboard_dir=_local_output(spec, "tensorboard", f"{RUN_DIR}/tensorboard"),
        checkpoint_dir=str(checkpoints),
        # resolved, not required to exist yet: the preflight check says when one is missing
        inputs={name: str((spec.base_dir / spec.input_location(name, backend)).resolve()) for name in spec.inputs},
    )


def _local_output(spec: JobSpec, name: str, default: str) -> str:
    output = spec.outputs.get(name)
    if output is None or not output.path:
        return default
    if "://" in output.path:
        raise UserError(f"outputs.{name}.path: {output.path} is remote; the local backend writes local folders")
    return str((spec.base_dir / output.path).resolve())


def _checkpoints(spec: JobSpec, folder: Path, *, own_script: bool) -> Checkpoints:
    return Checkpoints(
        folder=folder,
        owner=checkpoint_owner(spec),
        found=contents.look(
            folder,
            shared_script=not own_script,
            keeps=bool(spec.checkpoint.files),
            siblings=not (spec.checkpoint.path or spec.checkpoint.key),
            patterns=contents.patterns_given(spec),
        ),
        never_resume=spec.checkpoint.resume == "never",
    )
