"""The sections a job spec is made of (``code``, ``inputs``, ``resources``, ``env``, ``checkpoint``, ``limits`` ...),
each a strict model that checks its own fields; :mod:`cloudddp.spec.model` composes them into the job spec and
checks what spans sections.

Values that several sections (and the backends' own sections) read are here too: durations (``"2h"``), regular
expressions with a value group, and :class:`Strict`, the base of every section.

Unlike the rest of cloudddp, the annotations here are evaluated as the classes are made, not kept as strings: pydantic
then reads each field's type as it is, instead of compiling and evaluating its string at every start (as for
:mod:`cloudddp.spec.model`, ~9M instructions of every command that reads a spec).
"""

import re
from collections.abc import Iterable
from pathlib import PurePosixPath
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializationInfo,
    field_serializer,
    field_validator,
    model_validator,
)
from typing_extensions import Self

from cloudddp.spec.placeholders import unknown
from cloudddp.spec.values import AutoOnOff, Duration, DurationOrOff

_CHECKPOINT_KEY = re.compile(r"^[A-Za-z0-9_.-]{1,64}\Z")


def validate_regex(regex: str) -> str:
    """``regex`` if it compiles with at least one group (the value); else a ValueError saying why."""
    try:
        compiled = re.compile(regex)
    except re.error as e:
        raise ValueError(f"not a regular expression: {e}") from None
    if compiled.groups < 1:
        raise ValueError("needs one group, the value: e.g. 'loss=([0-9.eE+-]+)'")
    return regex


def _factor_or_off(value: Any) -> Any:
    """A factor above 1 (at most 100), or ``off`` (read as false when written unquoted in YAML)."""
    if value is False or (isinstance(value, str) and value.strip().lower() == "off"):
        return "off"
    try:
        factor = float(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        factor = None
    if factor is None or not 1 < factor <= 100:
        raise ValueError("expected a factor above 1 such as 1.5 (at most 100), or 'off'")
    return factor


FactorOrOff = Annotated[float | Literal["off"], BeforeValidator(_factor_or_off)]


def empty_list() -> list[Any]:
    """An empty list: the default factory of a list field, in place of ``list``. Pydantic reads every default
    factory's signature, and ``list``'s is parsed from its text with tokenize's regex, which every command would
    compile for it (~3 ms); a Python function's is read directly."""
    return []


class Strict(BaseModel):
    """Base of every spec section: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    env_fallbacks: ClassVar[dict[str, tuple[str, ...]]] = {}
    """A backend section's fields that the backend reads from these environment variables when the job leaves them
    out: a variable that is set wins over the user configuration's value (:mod:`cloudddp.spec.userconfig`)."""


class Code(Strict):
    """What runs: a directory packaged with the job, and an entry script with arguments (or a command)."""

    dir: str = Field(".", description="Code directory, relative to the spec file. Packaged with every job.")
    entry: str | None = Field("train.py", description="Entry script inside `dir`, launched once per process.")
    args: list[str] = Field(default_factory=empty_list, description="Arguments passed to the entry script.")
    command: list[str] | None = Field(
        None, description="Instead of entry+args: the program and arguments each process runs (argv list)."
    )
    ignore: list[str] = Field(
        default_factory=empty_list, description="Extra .gitignore-style patterns left out of the code snapshot."
    )
    requirements: list[str] = Field(
        default_factory=empty_list,
        description="pip requirement lines installed before the script starts, on every backend "
        "(or a requirements.txt in `dir`).",
    )
    max_size_mb: int = Field(
        2000,
        ge=1,
        le=100_000,
        description="The most the code folder may hold (MB, before compression); data belongs in `inputs:`.",
    )

    @field_validator("args", "command", mode="before")
    @classmethod
    def _scalars_to_str(cls, v: Any) -> Any:
        if isinstance(v, list):
            return [str(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else x for x in v]
        return v

    @field_validator("args", "command")
    @classmethod
    def _known_placeholders(cls, v: list[str] | None) -> list[str] | None:
        for word in v or ():
            why = unknown(word)
            if why:
                raise ValueError(why)
        return v

    @model_validator(mode="after")
    def _entry_or_command(self) -> Self:
        if self.command is not None:
            if not self.command:
                raise ValueError("`command` must not be empty")
            if self.args:
                raise ValueError("give either `command` or `entry` + `args`, not both")
            self.__dict__["entry"] = None
        elif not self.entry:
            raise ValueError("give `entry` (a script in `dir`) or `command`")
        return self


class Input(Strict):
    """A data input: a local folder (uploaded with the job) or a cloud URI (mounted or downloaded).

    ``at`` gives the input's location per backend when it lives somewhere else there, e.g.
    ``at: {sagemaker: s3://bucket/cifar10/, azureml: azureml://datastores/x/paths/cifar10/}``.
    """

    path: str | None = Field(
        None, description="Local path (relative to the spec file) or s3://, azureml://, https:// URI."
    )
    at: dict[str, str] = Field(
        default_factory=dict, description="Where this input is on a given backend, by backend name (instead of `path`)."
    )
    mode: Literal["download", "mount"] = Field(
        "download",
        description="How a cloud hands it to the job: download (copied before the script starts) or mount (read in "
        "place: SageMaker's FastFile, Azure ML's ro_mount).",
    )
    kind: Literal["auto", "file", "folder"] = Field(
        "auto",
        description="What the input is. auto: a URI whose last segment has a file extension (`.tar.gz`, `.csv`, "
        "`.npz`) is a file, anything else (a trailing `/`, no extension) a folder; a local path is what "
        "it is on disk. Where a backend can hand over a single file (Azure ML's uri_file), the input's "
        "path in the job is then the file itself.",
    )
    arg: str | None = Field(
        None, description="Script argument that receives the input's path in the job, e.g. `--data-dir`."
    )

    @model_validator(mode="after")
    def _somewhere(self) -> Self:
        if self.path is None and not self.at:
            raise ValueError("give `path` (a local folder or a URI) and/or `at: {<backend>: <URI>}`")
        return self


OUTPUT_NAMES = {
    "model": "the final model, written by rank 0 to CLOUDDDP_MODEL_DIR",
    "tensorboard": "TensorBoard logs, written to CLOUDDDP_TENSORBOARD_DIR (SageMaker syncs them while the job runs)",
}


class Output(Strict):
    """Where one of the job's outputs goes (``model``, ``tensorboard``)."""

    path: str | None = Field(None, description="Cloud URI or local folder; default: the backend's output location.")


class Resources(Strict):
    """What the job needs. Sizes are chosen from these unless a backend section names one."""

    nodes: int = Field(1, ge=1, le=512, description="Number of machines.")
    gpus_per_node: int = Field(
        0, ge=0, le=16, description="GPUs per node; one training process per GPU. 0 means CPU training."
    )
    accelerator: str | None = Field(None, description="GPU model, e.g. A100, H100, V100.")
    min_gpu_memory_gb: float | None = Field(
        None, gt=0, le=1024, description="The least memory per GPU, GB: sizes with less are not chosen."
    )
    interconnect: Literal["auto", "rdma", "any"] = Field(
        "auto",
        description="auto: InfiniBand/EFA (RDMA) required when nodes > 1; rdma: always; any: do not check.",
    )
    processes_per_node: int | None = Field(
        None,
        ge=1,
        le=128,
        description="Training processes per node; default one per GPU, or 1 without GPUs (CPU training).",
    )
    spot: bool = Field(False, description="Spot (AWS) / low-priority (Azure) capacity.")
    max_price_per_hour: float | None = Field(None, gt=0, description="Ceiling for the whole job, USD/h.")
    max_cost: float | None = Field(
        None,
        gt=0,
        description="Budget for the whole job, USD: render warns when the estimate is over it; backends that report "
        "spend while a run is going stop it (a cancel: it checkpoints) when its spend reaches it.",
    )
    step_time: float | None = Field(
        None,
        gt=0,
        le=86_400,
        description="Seconds per optimizer step, measured (e.g. locally): the cost estimate of a script cloudddp "
        "does not know uses it on every size.",
    )
    steps: int | None = Field(
        None,
        ge=1,
        description="Optimizer steps of the whole job, for the cost estimate of a script cloudddp does not know.",
    )
    disk_gb: int = Field(
        100, ge=1, le=16384, description="Disk per node, GB: SageMaker's volume unless sagemaker.volume_gb gives one."
    )

    @model_validator(mode="after")
    def _one_process_per_gpu(self) -> Self:
        n = self.processes_per_node
        if n is not None and self.gpus_per_node and n != self.gpus_per_node:
            raise ValueError(
                f"processes_per_node {n} with {self.gpus_per_node} GPUs per node: DDP runs one process "
                "per GPU; leave processes_per_node out when the job has GPUs"
            )
        return self

    @property
    def processes(self) -> int:
        """Training processes per node on a machine with the GPUs the spec asks for."""
        return self.processes_per_node or self.gpus_per_node or 1


class Distribution(Strict):
    """How processes talk: the process-group backend and the launcher that starts them."""

    backend: Literal["auto", "nccl", "gloo", "smddp"] = Field(
        "auto", description="auto: nccl on GPU, gloo on CPU. smddp: SageMaker's data-parallel library."
    )
    launcher: Literal["torchrun", "mpi"] = Field(
        "torchrun",
        description="What starts the processes: torchrun (an agent per node), or mpi (Azure ML's MPI distribution, "
        "SageMaker's mpirun, one srun task per process on Slurm).",
    )
    collective_timeout: Duration = Field(
        600, description="A rank that stops participating fails the others after this long."
    )
    preflight: AutoOnOff = Field(
        "auto",
        description="The interconnect pre-flight before the program starts: an all-reduce sweep across every rank "
        "that measures the bus bandwidth and the transport NCCL picked, and stops the job as an infrastructure "
        "failure when a size chosen for its InfiniBand/EFA runs over TCP sockets. auto: on for a multi-node job on "
        "a size the plan chose for its InfiniBand/EFA; on: every job of more than one process; off: never.",
    )


REVEAL_SECRETS = "reveal_secrets"
"""Serialization context key: ``model_dump(context={REVEAL_SECRETS: True})`` keeps literal secret values
(only to rebuild a spec in memory); every other dump shows :data:`HIDDEN` in their place."""
HIDDEN = "<secret>"
MIN_SECRET_CHARS = 8  # as cloudddp.plan.MIN_SECRET_CHARS


class EnvValue(Strict):
    """An environment variable given in full form; ``secret: true`` keeps it out of every artefact,
    this object's repr and its dumps included."""

    value: str | None = Field(None, description="The value; a plain string in the spec is short for {value: ...}.")
    from_env: str | None = Field(None, description="Read the value from this variable of the submitting shell.")
    secret: bool = Field(
        False,
        description="Keep the value out of every plan, log, run record and error; it is filled in only at launch "
        "(8 characters or more).",
    )

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.value is None) == (self.from_env is None):
            raise ValueError("give exactly one of `value` or `from_env`")
        why = None if self.secret or self.value is None else unknown(self.value)
        if why:
            raise ValueError(why)
        if self.secret and self.value is not None and len(self.value) < MIN_SECRET_CHARS:
            raise ValueError(
                f"a secret value needs {MIN_SECRET_CHARS} characters or more: a shorter one cannot be told apart "
                "from ordinary output to keep it out of the logs (or drop `secret: true` if it is not one)"
            )
        return self

    @field_serializer("value")
    def _hide_secret(self, value: str | None, info: SerializationInfo) -> str | None:
        if self.secret and value is not None and not (info.context or {}).get(REVEAL_SECRETS):
            return HIDDEN
        return value

    def __repr_args__(self) -> Iterable[tuple[str | None, Any]]:
        for name, shown in super().__repr_args__():
            yield name, HIDDEN if name == "value" and self.secret and shown is not None else shown


def _env_value(v: Any) -> Any:
    """A plain value is shorthand for ``{value: ...}``."""
    if isinstance(v, str):
        return {"value": v}
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return {"value": str(v)}
    if isinstance(v, (dict, EnvValue)):
        return v
    raise ValueError("expected a string, or a mapping {value | from_env, secret}")


EnvEntry = Annotated[EnvValue, BeforeValidator(_env_value)]


class MetricSpec(Strict):
    """A metric a script prints in its own words, found by a regular expression over its log lines."""

    name: str = Field(
        pattern=r"^[A-Za-z_][A-Za-z0-9_.:/-]{0,254}$",
        description="The metric's name; `epoch` and `step` set the record's epoch and step.",
    )
    regex: str = Field(max_length=500, description="Its first group is the value, e.g. 'loss: ([0-9.]+)'.")

    @field_validator("regex")
    @classmethod
    def _compiles(cls, v: str) -> str:
        return validate_regex(v)


class Metrics(Strict):
    """The metrics a script prints in its own words, and whose output they are read from. In a spec, either the
    list of declared metrics (read from global rank 0's output) or this mapping."""

    declared: list[MetricSpec] = Field(
        default_factory=empty_list,
        description="Metrics the script prints in its own words (CLOUDDDP_METRIC lines are always read).",
    )
    ranks: Literal["0", "all"] = Field(
        "0",
        description="Whose output metrics are read from: global rank 0's (a measurement every rank prints is one "
        "record), or every rank's ('all': each record then names its rank).",
    )

    @field_validator("ranks", mode="before")
    @classmethod
    def _rank_number(cls, v: Any) -> Any:
        return "0" if v == 0 and not isinstance(v, bool) else v

    @field_validator("declared")
    @classmethod
    def _distinct_metrics(cls, v: list[MetricSpec]) -> list[MetricSpec]:
        names = [m.name for m in v]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"metric {twice[0]!r} is declared twice")
        if len(v) > 32:  # SageMaker takes 40 MetricDefinitions; the shared script's own use the rest
            raise ValueError(f"{len(v)} metrics declared; at most 32")
        return v


class Checkpoint(Strict):
    """Checkpointing: rank 0 writes atomically every N epochs; a restarted job resumes from the newest."""

    enabled: bool = Field(
        True, description="The job gets its checkpoint folder (CLOUDDDP_CHECKPOINT_DIR), and the shared script saves."
    )
    every_epochs: int = Field(
        1, ge=1, description="The shared script checkpoints every this many epochs (CLOUDDDP_CHECKPOINT_EVERY)."
    )
    every_minutes: float | None = Field(
        None,
        gt=0,
        description="Also checkpoint mid-epoch once this many minutes have passed since the last checkpoint: bounds "
        "the work lost where capacity is taken back without a signal (Azure ML low priority). Read by the shared "
        "script from CLOUDDDP_CHECKPOINT_MINUTES.",
    )
    resume: Literal["auto", "never"] = Field(
        "auto",
        description="auto: a run resumes from the newest checkpoint in its folder; never: it starts over "
        "(CLOUDDDP_RESUME).",
    )
    path: str | None = Field(None, description="Cloud URI for checkpoints; default: under the job's output.")
    key: str | None = Field(
        None,
        description="Names a variant of the training: the checkpoint folder is the job's name, its program and this "
        "key, never its arguments or size, so give another learning rate, model or dataset its own key (or name). "
        "Letters, digits, '-', '_' and '.', at most 64.",
    )
    files: list[str] = Field(
        default_factory=empty_list,
        max_length=64,
        description="Files your script saves and loads itself (e.g. snapshot.pt, 'state/*.json'), relative to its "
        "working folder or absolute: each resolves into the checkpoint folder on every node (a link into "
        "CLOUDDDP_CHECKPOINT_DIR/files), so a resubmit resumes. docs/own-script.md says what breaks a link.",
    )

    @field_validator("key")
    @classmethod
    def _short_safe_name(cls, v: str | None) -> str | None:
        if v is not None and not _CHECKPOINT_KEY.match(v):
            raise ValueError(
                f"{v!r} is not a short safe name: use letters, digits, '-', '_' and '.', at most 64 (e.g. lr-0.05)"
            )
        return v

    @field_validator("files")
    @classmethod
    def _kept_paths(cls, v: list[str]) -> list[str]:
        for path in v:
            _kept_path(path)
        twice = sorted({p for p in v if v.count(p) > 1})
        if twice:
            raise ValueError(f"{twice[0]!r} is declared twice")
        return v

    @model_validator(mode="after")
    def _files_need_checkpoints(self) -> Self:
        if self.files and not self.enabled:
            raise ValueError("`files` are kept in the checkpoint folder: set `enabled: true`, or drop `files`")
        return self


def _kept_path(path: str) -> None:
    """A ``checkpoint.files`` entry: a file's path (or a glob pattern) inside or outside the working folder."""
    if not path.strip() or "\0" in path or "\n" in path:
        raise ValueError(f"{path!r} is not a file's path")
    parts = PurePosixPath(path).parts
    if ".." in parts:
        raise ValueError(f"{path!r}: '..' is not allowed; give a path inside the working folder, or an absolute one")
    if path.endswith("/") or parts in ((".",), ("/",)):
        raise ValueError(f"{path!r} is a folder: declare the files in it, e.g. '{path.rstrip('/') or '.'}/**'")
    if parts and parts[-1].startswith("_cloudddp_"):
        raise ValueError(f"{path!r} is a file cloudddp ships with the code")


class Limits(Strict):
    """How long a job may run, and what follows when it fails or is stopped."""

    max_runtime: Duration = Field(24 * 3600, description="Seconds or '2h'; the job is stopped after this.")
    max_restarts: int = Field(0, ge=0, le=100, description="Group restarts after a worker fails.")
    max_recoveries: int = Field(
        0,
        ge=0,
        le=100,
        description="Resubmissions after the job ends by preemption, lost capacity or an infrastructure fault "
        "(never after a failure of its own code); a detached watcher does it.",
    )
    recover_to: Literal["same_size", "next_size", "any_backend"] = Field(
        "same_size",
        description="Where a recovery goes after `capacity_tries` capacity failures on one size: `next_size` "
        "moves to the next size in the plan's ranking that passes the preflight checks (backends that choose "
        "sizes from the catalog); `same_size` keeps trying the size of the first attempt; `any_backend` moves to "
        "the next backend of the job's placement (`backends:`, or those configured) after a preemption or "
        "`capacity_tries` capacity failures, carrying the latest checkpoint there (docs/placement.md).",
    )
    capacity_tries: int = Field(
        2, ge=1, le=20, description="Capacity failures on one size before `recover_to: next_size` moves on."
    )
    queue_timeout: Duration = Field(
        3600,
        description="Seconds or '30m' a job may wait in its platform's queue before a recovery that can move "
        "(`recover_to: next_size`, `-b auto`, `recover_to: any_backend`) cancels it and moves on as after a capacity "
        "failure (Azure ML: a job Queued for want of quota or nodes; docs/recovery.md).",
    )
    stall_timeout: DurationOrOff | None = Field(
        None,
        description="Fail the run as stalled when no rank has printed a line (or a metric) for this long, after "
        "dumping every rank's Python stack into the log; default: twice `distribution.collective_timeout`, so a "
        "script that uses the collective timeout fails by itself first. Before the first line the watchdog allows "
        "at least 10 minutes for starting. `off` turns it off (for a script that is silent for longer stretches, "
        "set it above its longest silence).",
    )
    straggler_factor: FactorOrOff = Field(
        1.5,
        description="Name a straggler (a warning in `status`, the log and the metrics, with its host) when one rank's "
        "own work per step (data loading, forward, the script's own, measured inside every rank) stays at least this "
        "many times the other ranks' median for two looks in a row; `off` turns the watch off (docs/diagnosing.md).",
    )
    straggler_every: Duration = Field(
        10, description="Seconds or '1m' between two looks of the straggler watch (each rank publishes one number)."
    )
