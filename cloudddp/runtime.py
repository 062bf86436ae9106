"""The runtime contract: what every training process is told, with the same names on every backend.

Each backend says where things are inside its jobs (:class:`Places`); this module turns that into the
environment every process gets, so a script written against these names runs unchanged everywhere:

================================  =================================================================
``CLOUDDDP_JOB_NAME``             the job's name (``name:`` in the spec)
``CLOUDDDP_RUN_ID``               this run's id on its backend (what ``cloudddp status`` takes)
``CLOUDDDP_BACKEND``              the backend running it (local, sagemaker, azureml, ...)
``CLOUDDDP_INPUT_<NAME>``         where input ``<name>`` is inside the job (upper-cased name)
``CLOUDDDP_MODEL_DIR``            where rank 0 writes the final model (kept after the run)
``CLOUDDDP_CHECKPOINT_DIR``       where checkpoints go; a restarted or resubmitted job finds them there
``CLOUDDDP_TENSORBOARD_DIR``      where TensorBoard logs go (only when the spec declares outputs.tensorboard)
``CLOUDDDP_RESUME``               ``auto`` (resume from the newest checkpoint) or ``never``
``CLOUDDDP_CHECKPOINT_EVERY``     epochs between checkpoints (0: checkpointing is off)
``CLOUDDDP_CHECKPOINT_MINUTES``   minutes after which a checkpoint is also written mid-epoch (0: only at epoch ends)
``CLOUDDDP_DIST_BACKEND``         the process-group backend: nccl, gloo or smddp
``CLOUDDDP_COLLECTIVE_TIMEOUT``   seconds a collective waits for a missing rank before failing
``CLOUDDDP_SIGTERM_GRACE``        seconds between SIGTERM (cancel, preemption) and SIGKILL here
``PYTHONUNBUFFERED``              ``1``: output reaches the logs as it is printed
================================  =================================================================

plus the launcher's standard variables (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``; ``OMPI_COMM_WORLD_*`` under MPI).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from cloudddp.code import requirements
from cloudddp.code.ignore import ignore_line
from cloudddp.code.requirements import FILE, file_text
from cloudddp.code.shipped import Snapshot
from cloudddp.code.snapshot import holds_sha256, pack
from cloudddp.errors import UserError
from cloudddp.injob import (
    container_init,
    framework_logs,
    hang,
    interconnect,
    keepfiles,
    mpi_env,
    output_lines,
    pace,
    preload,
    resume_arg,
    stack_requests,
    stop_hooks,
)
from cloudddp.injob.shim import SHIPPED_AS
from cloudddp.paths import PACKAGE
from cloudddp.plan import EnvSource, late
from cloudddp.spec.model import JobSpec
from cloudddp.spec.placeholders import INPUT, at_start, expand, last_checkpoint
from cloudddp.spec.secrets import rendered_env

PREFIX = "CLOUDDDP_"
INPUT_PREFIX = "CLOUDDDP_INPUT_"
MODEL_DIR = "CLOUDDDP_MODEL_DIR"
CHECKPOINT_DIR = "CLOUDDDP_CHECKPOINT_DIR"
TENSORBOARD_DIR = "CLOUDDDP_TENSORBOARD_DIR"
PREFLIGHT = interconnect.SETTING
"""What turns the rank launcher's interconnect pre-flight on, with the fabric it checks (``infiniband:400``,
``efa:3200``, ``any``): cloudddp's own, not part of the contract a script reads."""
STRAGGLER = pace.SETTING
"""What turns the straggler watch inside the ranks on (:mod:`cloudddp.injob.pace`): ``<factor>:<seconds>``, from
``limits.straggler_factor`` and ``limits.straggler_every``; cloudddp's own, not part of the contract."""
RUN_ID = late("RUN_ID")
"""The run id in the contract until it is known: backends that name the run at render fill it there."""
NAMES = (
    "CLOUDDDP_JOB_NAME",
    "CLOUDDDP_RUN_ID",
    "CLOUDDDP_BACKEND",
    MODEL_DIR,
    CHECKPOINT_DIR,
    "CLOUDDDP_RESUME",
    "CLOUDDDP_CHECKPOINT_EVERY",
    "CLOUDDDP_CHECKPOINT_MINUTES",
    "CLOUDDDP_DIST_BACKEND",
    "CLOUDDDP_COLLECTIVE_TIMEOUT",
    "CLOUDDDP_SIGTERM_GRACE",
    "CLOUDDDP_NUM_NODES",
    "CLOUDDDP_PROCESSES_PER_NODE",
    TENSORBOARD_DIR,
)


@dataclass(frozen=True)
class Places:
    """Where things are inside a job on one backend (paths, or the backend's own expressions), and the shape the
    backend runs it in (the local backend's comes from ``local.*``, the clouds' from ``resources.*``)."""

    model_dir: str
    checkpoint_dir: str | None
    """None when checkpointing is off."""
    nodes: int
    processes_per_node: int
    inputs: Mapping[str, str] = field(default_factory=dict)
    """Input name -> where it is inside the job."""
    tensorboard_dir: str | None = None
    """Where TensorBoard logs go, when the spec declares ``outputs.tensorboard``."""
    fabric: str | None = None
    """The interconnect the plan chose the size for (:func:`fabric_of`), which the pre-flight checks."""


def fabric_of(fabric: str, gbps: float | None, nodes: int) -> str | None:
    """The interconnect a multi-node plan chose its size for, as the pre-flight is told it (``infiniband:400``,
    ``efa:3200``): None on one node or on a size without InfiniBand/EFA."""
    if nodes < 2 or fabric not in ("infiniband", "efa"):
        return None
    return f"{fabric}:{gbps or 0:g}"


def preflight_setting(spec: JobSpec, places: Places) -> str | None:
    """``CLOUDDDP_PREFLIGHT`` (:mod:`cloudddp.injob.interconnect`): ``distribution.preflight`` on, or ``auto`` on a
    multi-node size the plan chose for its InfiniBand/EFA; None when off."""
    asked = spec.distribution.preflight
    if asked == "off" or (asked == "auto" and places.fabric is None):
        return None
    return places.fabric or "any"


def straggler_setting(spec: JobSpec, places: Places) -> str | None:
    """``CLOUDDDP_STRAGGLER`` for a job of more than one process, unless ``limits.straggler_factor`` is off."""
    factor = spec.limits.straggler_factor
    if factor == "off" or places.nodes * places.processes_per_node < 2:
        return None
    return f"{factor:g}:{spec.limits.straggler_every}"


def contract_env(spec: JobSpec, backend: str, places: Places, *, on_gpu: bool, sigterm_grace: int) -> dict[str, str]:
    """The ``CLOUDDDP_*`` variables of the contract for ``spec`` on ``backend``."""
    ckpt = spec.checkpoint
    env = {
        "PYTHONUNBUFFERED": "1",
        "CLOUDDDP_JOB_NAME": spec.name,
        "CLOUDDDP_RUN_ID": RUN_ID,
        "CLOUDDDP_BACKEND": backend,
        "CLOUDDDP_DIST_BACKEND": spec.process_group_backend(on_gpu=on_gpu),
        "CLOUDDDP_COLLECTIVE_TIMEOUT": str(spec.distribution.collective_timeout),
        MODEL_DIR: places.model_dir,
        "CLOUDDDP_RESUME": ckpt.resume,
        "CLOUDDDP_CHECKPOINT_EVERY": str(ckpt.every_epochs if ckpt.enabled else 0),
        "CLOUDDDP_CHECKPOINT_MINUTES": str(ckpt.every_minutes if ckpt.enabled and ckpt.every_minutes else 0),
        "CLOUDDDP_SIGTERM_GRACE": str(sigterm_grace),
        "CLOUDDDP_NUM_NODES": str(places.nodes),
        "CLOUDDDP_PROCESSES_PER_NODE": str(places.processes_per_node),
    }
    if ckpt.enabled and places.checkpoint_dir is not None:
        env[CHECKPOINT_DIR] = places.checkpoint_dir
    preflight = preflight_setting(spec, places)
    if preflight is not None:
        env[PREFLIGHT] = preflight
    straggler = straggler_setting(spec, places)
    if straggler is not None:
        env[STRAGGLER] = straggler
    if "tensorboard" in spec.outputs and places.tensorboard_dir is not None:
        env[TENSORBOARD_DIR] = places.tensorboard_dir
    for name, where in places.inputs.items():
        env[INPUT_PREFIX + name.upper()] = where
    return env


def job_env(
    spec: JobSpec,
    backend: str,
    places: Places,
    *,
    on_gpu: bool,
    sigterm_grace: int,
    presets: Mapping[str, str] | None = None,
) -> tuple[dict[str, str], dict[str, EnvSource]]:
    """Every variable a process gets: the spec's ``env`` (secrets as placeholders), backend presets the
    spec does not set (e.g. NCCL settings for a fabric), then the contract. Returns the environment and
    where its late-bound values come from."""
    user, sources = rendered_env(spec)
    taken = sorted(name for name in user if name.startswith(PREFIX))
    if taken:
        raise UserError(
            f"env.{taken[0]}: names starting with {PREFIX} are set by cloudddp on every backend",
            hint="rename the variable; docs/runtime-contract.md lists what is set",
        )
    plain = {k: v for k, v in user.items() if k not in sources}  # a secret or from_env value is never expanded
    user.update({k: expanded(spec, places, v, f"env.{k}") for k, v in plain.items()})
    framework = {} if on_gpu else {"ACCELERATE_USE_CPU": "true"}
    everything = {**launcher_grace(sigterm_grace), **framework, **(presets or {})}
    extra = {k: v for k, v in everything.items() if k not in user}
    contract = contract_env(spec, backend, places, on_gpu=on_gpu, sigterm_grace=sigterm_grace)
    return {**user, **extra, **contract}, sources


def placeholder_values(spec: JobSpec, places: Places) -> dict[str, str]:
    """What each placeholder of :mod:`cloudddp.spec.placeholders` stands for in this job on this backend (a place
    the job does not have is absent: checkpoints off, no TensorBoard output)."""
    values = {
        "nodes": str(places.nodes),
        "processes_per_node": str(places.processes_per_node),
        "world_size": str(places.nodes * places.processes_per_node),
        "model_dir": places.model_dir,
        "output_dir": places.model_dir,
        "job_name": spec.name,
        **{f"{INPUT}{name}": where for name, where in places.inputs.items()},
    }
    if places.checkpoint_dir is not None and spec.checkpoint.enabled:
        values["checkpoint_dir"] = places.checkpoint_dir
    if places.tensorboard_dir is not None and "tensorboard" in spec.outputs:
        values["tensorboard_dir"] = places.tensorboard_dir
    return values


def expanded(spec: JobSpec, places: Places, text: str, field: str) -> str:
    """``text`` with its placeholders expanded for this job; a UserError naming ``field`` for a place the job does
    not have. ``{{last_checkpoint:PATTERN}}`` stays as it is, for each rank's launcher to expand when it starts
    (:mod:`cloudddp.injob.resume_arg`): only in the program's arguments, and only with checkpointing on."""
    values = placeholder_values(spec, places)
    if field.startswith(("code.args", "code.command")) and "checkpoint_dir" in values:
        values.update(at_start(text))
    try:
        return expand(text, values)
    except KeyError as e:
        name = e.args[0]
        if last_checkpoint(name) is not None:
            raise _late_misplaced(field, name) from None
        needs = "checkpointing on (checkpoint.enabled)" if name == "checkpoint_dir" else "outputs.tensorboard"
        raise UserError(
            f"{field}: {{{{{name}}}}} names a folder this job does not have", hint=f"the placeholder needs {needs}"
        ) from None


def _late_misplaced(field: str, name: str) -> UserError:
    """Why ``{{last_checkpoint:PATTERN}}`` cannot be where ``field`` has it."""
    if not field.startswith("code."):
        return UserError(
            f"{field}: {{{{{name}}}}} is expanded in the program's arguments alone (code.args, code.command), "
            "when each rank starts",
            hint="pass it to the script as an argument, or find the checkpoint in $CLOUDDDP_CHECKPOINT_DIR there",
        )
    return UserError(
        f"{field}: {{{{{name}}}}} names the newest checkpoint in a folder this job does not have",
        hint="the placeholder needs checkpointing on (checkpoint.enabled)",
    )


def launcher_grace(sigterm_grace: int) -> dict[str, str]:
    """How long torchrun's agent waits, after passing a stop's SIGTERM to its ranks, before it SIGKILLs them: the
    backend's whole grace (30 s left alone), so the grace a script is told (``CLOUDDDP_SIGTERM_GRACE``) is the
    grace it gets. Not Open MPI's ``odls_base_sigkill_timeout``: mpirun, on SIGTERM or when a rank fails, waits it
    *before* it sends the ranks SIGTERM and again before SIGKILL (Open MPI 4.1.4 here: with 20 s, a rank heard a
    stop 20 s late and a failed job ended 42 s after the failure instead of 4 s); an MPI rank is stopped by
    signalling it directly (SageMaker's init does: ``cloudddp/injob/container_init.py``)."""
    return {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(sigterm_grace)}


def code_snapshot(spec: JobSpec) -> Snapshot:
    """The job's code as every backend ships it: ``code.dir`` with its ignore rules, plus the files
    cloudddp ships with it (the launcher of :mod:`cloudddp.injob.shim`; the keeper of :mod:`cloudddp.injob.keepfiles`
    when the spec declares ``checkpoint.files``; ``requirements.txt`` when it lists ``code.requirements``), as one
    deterministic, content-addressed archive."""

    reqs = requirements.of(spec)
    extra = {
        **shipped_files(keep=bool(spec.checkpoint.files)),
        **({requirements.FILE: reqs.text.encode()} if reqs and reqs.shipped else {}),
    }
    limit = spec.code.max_size_mb * 1_000_000
    literal = [e.value for e in spec.env.values() if e.secret and e.value is not None]
    inputs = inputs_in_code(spec)
    return pack(spec.code_dir, spec.code.ignore, extra=extra, max_bytes=limit, inputs=inputs, secrets=literal)


def inputs_in_code(spec: JobSpec) -> dict[str, str]:
    """The job's local inputs that lie inside ``code.dir`` (their path there -> the input's name): data that
    travels as an input must not be uploaded a second time with the code. An input that is the whole folder
    stays: leaving it out would leave no code."""
    code_dir = spec.code_dir
    inside = {}
    for name, item in spec.inputs.items():
        if item.path is None or "://" in item.path:
            continue
        where = (spec.base_dir / item.path).resolve()
        if where != code_dir and where.is_relative_to(code_dir):
            inside[where.relative_to(code_dir).as_posix()] = name
    return inside


def code_problem(spec: JobSpec) -> tuple[tuple[str, str], UserError] | None:
    """What keeps the job's code from running, found without packing it, with the spec field at fault:
    ``code.dir`` is not a folder, or ``code.entry`` is not a file in it (with the closest file's name). None when
    both are there."""
    code_dir = spec.code_dir
    if not code_dir.is_dir():
        return ("code", "dir"), UserError(
            f"code.dir: {code_dir} is not a folder", hint="code.dir is relative to the spec file"
        )
    entry = spec.code.entry
    if entry and not (code_dir / entry).is_file():
        guess = difflib.get_close_matches(entry, _script_files(code_dir), n=1, cutoff=0.6)
        tip = f"; did you mean '{guess[0]}'?" if guess else ""
        return ("code", "entry"), UserError(
            f"code.entry: {entry} is not a file in {code_dir}{tip}",
            hint="code.entry is relative to code.dir (`cloudddp init --with-script` copies the shared script)",
        )
    return None


def _script_files(folder: Path, limit: int = 5000) -> list[str]:
    """The Python files under ``folder`` (relative, posix), hidden folders and virtual environments left out."""
    found: list[str] = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("node_modules", "__pycache__", "venv")]
        found += [Path(root, f).relative_to(folder).as_posix() for f in files if f.endswith(".py")]
        if len(found) >= limit:
            break
    return found


def checked_snapshot(spec: JobSpec) -> Snapshot:
    """:func:`code_snapshot` for a backend that runs ``code.entry`` from it: the folder and the entry exist, and
    no ignore rule leaves the entry out; a UserError naming the field otherwise."""
    problem = code_problem(spec)
    if problem is not None:
        raise problem[1]
    snapshot = code_snapshot(spec)
    if spec.code.entry and Path(spec.code.entry).as_posix() not in snapshot.files:
        raise UserError(
            f"code.entry: {spec.code.entry} is left out of the code snapshot by an ignore rule",
            hint="check code.ignore, .gitignore, .amlignore and .cloudddpignore in code.dir",
        )
    return snapshot


def shipped_files(*, keep: bool = False) -> dict[str, bytes]:
    """Files cloudddp adds to every code snapshot, by their name there: the rank launcher, the container init
    (SageMaker's PID 1) and its own start of a job, the reader of the frameworks' log files
    (:mod:`cloudddp.injob.framework_logs`), the line discipline of the program's output
    (:mod:`cloudddp.injob.output_lines`), the importer of what a script needs imported first
    (:mod:`cloudddp.injob.preload`: smddp's backend), the frameworks' stop hooks (:mod:`cloudddp.injob.stop_hooks`),
    the hang doctor and its judge (:mod:`cloudddp.injob.hang`, :mod:`cloudddp.injob.culprit`), the straggler watch
    (:mod:`cloudddp.injob.pace`), the chooser of
    ``{{last_checkpoint:PATTERN}}`` (:mod:`cloudddp.injob.resume_arg`), the MPI variables
    (:mod:`cloudddp.injob.mpi_env`), the interconnect pre-flight (:mod:`cloudddp.injob.interconnect`), the answerer
    of stack requests and the asker of the ranks (:mod:`cloudddp.injob.stack_requests`,
    :mod:`cloudddp.injob.rank_stacks`); ``keep``: the
    keeper of ``checkpoint.files`` too (only a job that declares some gets it, so no other snapshot changes). Read from
    the package's folder, as the catalog's data is (:func:`cloudddp.paths.data_text` says why)."""
    code = PACKAGE / "injob"
    files = {
        SHIPPED_AS: (code / "shim.py").read_bytes(),
        container_init.SHIPPED_AS: (code / "container_init.py").read_bytes(),
        container_init.START_AS: (code / "container_start.py").read_bytes(),
        framework_logs.SHIPPED_AS: (code / "framework_logs.py").read_bytes(),
        output_lines.SHIPPED_AS: (code / "output_lines.py").read_bytes(),
        preload.SHIPPED_AS: (code / "preload.py").read_bytes(),
        stop_hooks.SHIPPED_AS: (code / "stop_hooks.py").read_bytes(),
        stop_hooks.LIGHTNING_AS: (code / "lightning_stop.py").read_bytes(),
        stop_hooks.TRANSFORMERS_AS: (code / "transformers_stop.py").read_bytes(),
        stop_hooks.HANG_AS: (code / "hang.py").read_bytes(),
        hang.CULPRIT_AS: (code / "culprit.py").read_bytes(),
        stop_hooks.PACE_AS: (code / "pace.py").read_bytes(),
        resume_arg.SHIPPED_AS: (code / "resume_arg.py").read_bytes(),
        mpi_env.SHIPPED_AS: (code / "mpi_env.py").read_bytes(),
        interconnect.SHIPPED_AS: (code / "interconnect.py").read_bytes(),
        stack_requests.SHIPPED_AS: (code / "stack_requests.py").read_bytes(),
        stack_requests.RANK_STACKS_AS: (code / "rank_stacks.py").read_bytes(),
    }
    if keep:
        files[keepfiles.SHIPPED_AS] = (code / "keepfiles.py").read_bytes()
    return files


def snapshot_upload(spec: JobSpec, snapshot: Snapshot, destination: str) -> dict[str, Any]:
    """The plan's record of the code snapshot: where the archive is here, where it goes, what it holds."""

    reqs = requirements.of(spec)
    return {
        "kind": "code",
        "path": str(snapshot.path),
        "source": str(spec.code_dir),
        # the spec files left out for their secrets, by name: packed again (launch after a pruned cache), the
        # folder gives the same archive without the values
        "ignore": [*spec.code.ignore, *map(ignore_line, snapshot.secrets_left_out)],
        "requirements": list(reqs.lines) if reqs and reqs.shipped else [],
        "keep": bool(spec.checkpoint.files),
        "max_bytes": spec.code.max_size_mb * 1_000_000,
        "destination": destination,
        "sha256": snapshot.sha256,
        "bytes": snapshot.size,
        "files": len(snapshot.files),
    }


def packed(upload: Mapping[str, Any]) -> Path:
    """The archive a plan's code upload refers to: from the snapshot cache, or packed again from its folder
    (the cache may have been pruned since render); an error when the folder changed in between."""
    from pathlib import Path

    path = Path(upload["path"])
    if path.is_file() and path.name == f"{upload['sha256']}.tar.gz" and holds_sha256(path, upload["sha256"]):
        return path
    extra = shipped_files(keep=upload.get("keep", False))
    if upload["requirements"]:
        extra[FILE] = file_text(upload["requirements"]).encode()
    again = pack(Path(upload["source"]), upload["ignore"], extra=extra, max_bytes=upload["max_bytes"])
    if again.sha256 != upload["sha256"]:
        raise UserError(f"code.dir {upload['source']} changed between render and launch; render again")
    return again.path


def checkpoint_key(spec: JobSpec) -> str:
    """What makes two runs the same training, for their checkpoints (the folder ``<name>/<key>``): the job's
    name, its program (:func:`program_identity`) and ``checkpoint.key``. Nothing else: its arguments, inputs,
    environment, node count, processes and backend do not move the folder, so a resubmit that adds an argument
    (``--resume_from_checkpoint``, more epochs, Lightning's ``--num_nodes``) or moves to more nodes finds its
    checkpoints. A variant that must not load another's checkpoints (another learning rate, model or dataset) is
    named as one: its own ``name`` or ``checkpoint.key``; where the plan can read the folder, it says when the
    arguments differ from those that wrote the checkpoint it resumes (:mod:`cloudddp.backends.checkpoints.contents`)."""
    import hashlib
    import json

    what = {"program": program_identity(spec), "key": spec.checkpoint.key}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]


def program_identity(spec: JobSpec) -> list[str]:
    """The program a training runs, without its arguments: ``code.entry``; or the words of ``code.command`` before
    its first option (``-x``, ``--x``) or ``key=value`` override (``[accelerate, launch, train.py, --lr, ...]``:
    ``accelerate launch train.py``)."""
    if spec.code.command is None:
        return [spec.code.entry or ""]
    words: list[str] = []
    for word in spec.code.command:
        if word.startswith("-") or "=" in word:
            break
        words.append(word)
    return words


def checkpoint_owner(spec: JobSpec) -> str:
    """Why the plan's checkpoint folder is the one it names, in words, for the plan's checkpoint line."""
    if spec.checkpoint.path:
        return "checkpoint.path"
    key = f", checkpoint.key {spec.checkpoint.key}" if spec.checkpoint.key else ""
    return (
        f"the training {spec.name} running {' '.join(program_identity(spec))}{key}: arguments and size do not move it"
    )


def program_words(spec: JobSpec) -> tuple[str, ...]:
    """The program and arguments as the spec gives them (``code.entry`` and ``code.args``, or ``code.command``),
    without the inputs' arguments, which differ by backend: what a run records beside its checkpoints."""
    if spec.code.command is not None:
        return tuple(spec.code.command)
    return (spec.code.entry or "", *spec.code.args)


def checkpoint_folder(spec: JobSpec, base: str) -> str:
    """Where this training's checkpoints live under ``base`` (``checkpoint.path`` when the spec names one)."""
    if spec.checkpoint.path:
        return spec.checkpoint.path
    return f"{base.rstrip('/')}/{spec.name}/{checkpoint_key(spec)}"


class Program(NamedTuple):
    """What each training process runs, the same on every backend: a script Python runs, or a command. A named
    tuple: cheaper to define than a frozen dataclass (~1 ms of every render)."""

    argv: tuple[str, ...]
    """``code.entry``, ``code.args`` and the inputs' arguments; or ``code.command`` and the inputs' arguments."""
    python: bool
    """``argv[0]`` is a script for Python (``code.entry``); False: ``argv`` is a program (``code.command``)."""


def program(spec: JobSpec, places: Places) -> Program:
    """The program of ``spec`` with its inputs' arguments pointing where ``places`` says they are and its
    placeholders (``{{nodes}}``, ``{{checkpoint_dir}}``...) expanded for this backend."""
    inputs = _input_args(spec, places)
    if spec.code.command is not None:
        words = tuple(expanded(spec, places, w, "code.command") for w in spec.code.command)
        return Program((*words, *inputs), python=False)
    assert spec.code.entry is not None, "the spec's own check: code.entry is set when code.command is not"
    args = tuple(expanded(spec, places, w, "code.args") for w in spec.code.args)
    return Program((spec.code.entry, *args, *inputs), python=True)


def _input_args(spec: JobSpec, places: Places) -> list[str]:
    """``[arg, where]`` for every input that names a script argument (``inputs.X.arg``)."""
    args: list[str] = []
    for name, item in spec.inputs.items():
        if item.arg:
            args += [item.arg, places.inputs[name]]
    return args
