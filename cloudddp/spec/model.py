"""The job spec: one declarative description of a DDP training job that every backend reads.

The model is strict (unknown keys are errors) so that a typo never silently changes a job. Paths in
the spec are relative to the spec file; :func:`cloudddp.spec.load.load_spec` resolves them.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, ClassVar, Literal, Protocol

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializationInfo,
    create_model,
    field_serializer,
    field_validator,
    model_validator,
)

from cloudddp.errors import UserError

_DURATION = re.compile(r"^\s*(?:(\d+)\s*d)?\s*(?:(\d+)\s*h)?\s*(?:(\d+)\s*m)?\s*(?:(\d+)\s*s?)?\s*\Z")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,62}\Z")  # \Z: `$` also matches before a final newline
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
MAX_SECONDS = 28 * 24 * 3600  # SageMaker's and Azure ML's longest job runtime
STALL_FACTOR = 2
"""``limits.stall_timeout`` defaults to this many collective timeouts: a script that passes the collective timeout
to ``init_process_group`` fails by itself first, and the watchdog catches the scripts that do not."""


def validate_regex(regex: str) -> str:
    """``regex`` if it compiles with at least one group (the value); else a ValueError saying why."""
    try:
        compiled = re.compile(regex)
    except re.error as e:
        raise ValueError(f"not a regular expression: {e}") from None
    if compiled.groups < 1:
        raise ValueError("needs one group, the value: e.g. 'loss=([0-9.eE+-]+)'")
    return regex


def parse_duration(value: Any) -> int:
    """Seconds from an int or a string such as ``90``, ``"45m"``, ``"2h"``, ``"1h30m"``, ``"1d"``."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 3600, '45m' or '2h'")
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, str) and value.strip() and (m := _DURATION.match(value)):
        d, h, mi, s = (int(g) if g else 0 for g in m.groups())
        seconds = ((d * 24 + h) * 60 + mi) * 60 + s
    else:
        raise ValueError("expected a duration such as 3600, '45m' or '2h'")
    if seconds <= 0 or seconds > MAX_SECONDS:
        raise ValueError(f"duration must be between 1 s and 28 days, got {seconds} s")
    return seconds


Duration = Annotated[int, BeforeValidator(parse_duration)]


def _duration_or_off(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() == "off":
        return "off"
    try:
        return parse_duration(value)
    except ValueError as e:
        raise ValueError(f"{e}, or 'off'") from None


DurationOrOff = Annotated[int | Literal["off"], BeforeValidator(_duration_or_off)]


class Strict(BaseModel):
    """Base of every spec section: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class Code(Strict):
    """What runs: a directory packaged with the job, and an entry script with arguments (or a command)."""

    dir: str = Field(".", description="Code directory, relative to the spec file. Packaged with every job.")
    entry: str | None = Field("train.py", description="Entry script inside `dir`, launched once per process.")
    args: list[str] = Field(default_factory=list, description="Arguments passed to the entry script.")
    command: list[str] | None = Field(
        None, description="Instead of entry+args: the program and arguments each process runs (argv list)."
    )
    ignore: list[str] = Field(
        default_factory=list, description="Extra .gitignore-style patterns left out of the code snapshot."
    )
    requirements: list[str] = Field(
        default_factory=list,
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

    @model_validator(mode="after")
    def _entry_or_command(self) -> Code:
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
    mode: Literal["download", "mount"] = "download"
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
    def _somewhere(self) -> Input:
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
    min_gpu_memory_gb: float | None = Field(None, gt=0, le=1024)
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
    disk_gb: int = Field(100, ge=1, le=16384)

    @model_validator(mode="after")
    def _one_process_per_gpu(self) -> Resources:
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
    launcher: Literal["torchrun", "mpi"] = "torchrun"
    collective_timeout: Duration = Field(
        600, description="A rank that stops participating fails the others after this long."
    )


REVEAL_SECRETS = "reveal_secrets"
"""Serialization context key: ``model_dump(context={REVEAL_SECRETS: True})`` keeps literal secret values
(only to rebuild a spec in memory); every other dump shows :data:`HIDDEN` in their place."""
HIDDEN = "<secret>"
MIN_SECRET_CHARS = 8  # as cloudddp.plan.MIN_SECRET_CHARS


class EnvValue(Strict):
    """An environment variable given in full form; ``secret: true`` keeps it out of every artefact,
    this object's repr and its dumps included."""

    value: str | None = None
    from_env: str | None = Field(None, description="Read the value from this variable of the submitting shell.")
    secret: bool = False

    @model_validator(mode="after")
    def _one_source(self) -> EnvValue:
        if (self.value is None) == (self.from_env is None):
            raise ValueError("give exactly one of `value` or `from_env`")
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
        default_factory=list,
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


def _metrics_section(v: Any) -> Any:
    """``metrics: [...]`` is the short form of ``metrics: {declared: [...]}``."""
    return {"declared": v} if isinstance(v, list) else v


class Checkpoint(Strict):
    """Checkpointing: rank 0 writes atomically every N epochs; a restarted job resumes from the newest."""

    enabled: bool = True
    every_epochs: int = Field(1, ge=1)
    every_minutes: float | None = Field(
        None,
        gt=0,
        description="Also checkpoint mid-epoch once this many minutes have passed since the last checkpoint: bounds "
        "the work lost where capacity is taken back without a signal (Azure ML low priority). Read by the shared "
        "script from CLOUDDDP_CHECKPOINT_MINUTES.",
    )
    resume: Literal["auto", "never"] = "auto"
    path: str | None = Field(None, description="Cloud URI for checkpoints; default: under the job's output.")
    files: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Files your script saves and loads itself (e.g. snapshot.pt, 'state/*.json'), relative to its "
        "working folder or absolute: each resolves into the checkpoint folder on every node (a link into "
        "CLOUDDDP_CHECKPOINT_DIR/files), so a resubmit resumes. docs/own-script.md says what breaks a link.",
    )

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
    def _files_need_checkpoints(self) -> Checkpoint:
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
    max_runtime: Duration = Field(24 * 3600, description="Seconds or '2h'; the job is stopped after this.")
    max_restarts: int = Field(0, ge=0, le=100, description="Group restarts after a worker fails.")
    max_recoveries: int = Field(
        0,
        ge=0,
        le=100,
        description="Resubmissions after the job ends by preemption, lost capacity or an infrastructure fault "
        "(never after a failure of its own code); a detached watcher does it.",
    )
    recover_to: Literal["same_size", "next_size"] = Field(
        "same_size",
        description="Where a recovery goes after `capacity_tries` capacity failures on one size: `next_size` "
        "moves to the next size in the plan's ranking that passes the preflight checks (backends that choose "
        "sizes from the catalog); `same_size` keeps trying the size of the first attempt.",
    )
    capacity_tries: int = Field(
        2, ge=1, le=20, description="Capacity failures on one size before `recover_to: next_size` moves on."
    )
    stall_timeout: DurationOrOff | None = Field(
        None,
        description="Fail the run as stalled when no rank has printed a line (or a metric) for this long, after "
        "dumping every rank's Python stack into the log; default: twice `distribution.collective_timeout`, so a "
        "script that uses the collective timeout fails by itself first. Before the first line the watchdog allows "
        "at least 10 minutes for starting. `off` turns it off (for a script that is silent for longer stretches, "
        "set it above its longest silence).",
    )


class Sections(Protocol):
    """Where the backends' sections of the spec come from. The spec does not know which backends exist: the
    backend registry, above it, passes itself (:data:`cloudddp.backends.registry.SECTIONS`)."""

    def names(self) -> list[str]:
        """Every registered backend's name, sorted."""
        ...

    def options_model(self, name: str) -> type[BaseModel]:
        """The options model of backend ``name`` (its ``<name>:`` section)."""
        ...

    def __hash__(self) -> int:
        """Composed models are cached per source of sections."""
        ...


class JobSpec(Strict):
    """A DDP training job. The same spec runs on every backend."""

    # Built on first use: a job is validated by the composed model (:func:`spec_model`), never by this base.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, title="cloudddp job spec", defer_build=True)

    name: str = Field(description="Job name: letters, digits and '-', at most 63 characters.")
    description: str | None = None
    code: Code = Field(default_factory=Code)
    inputs: dict[str, Input] = Field(default_factory=dict)
    outputs: dict[str, Output] = Field(default_factory=dict)
    resources: Resources = Field(default_factory=Resources)
    distribution: Distribution = Field(default_factory=Distribution)
    env: dict[str, EnvEntry] = Field(default_factory=dict)
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    metrics: Annotated[
        Metrics, BeforeValidator(_metrics_section, json_schema_input_type=list[MetricSpec] | Metrics)
    ] = Field(
        default_factory=Metrics,
        description="Metrics the script prints in its own words (CLOUDDDP_METRIC lines are always read): a list, "
        "read from global rank 0's output, or {declared: [...], ranks: all} to read every rank's.",
    )
    limits: Limits = Field(default_factory=Limits)
    tags: dict[str, str] = Field(default_factory=dict)

    # Set by the loader: the folder relative paths are resolved against. Not part of the schema.
    _base_dir: Path = Path(".")
    _sections: ClassVar[Sections | None] = None
    """The backends' sections this model was composed with (set by :func:`spec_model`)."""

    @field_validator("name")
    @classmethod
    def _valid_name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError("use letters, digits and '-' (start with a letter or digit), at most 63 characters")
        return v

    @field_validator("outputs")
    @classmethod
    def _known_outputs(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key in v:
            if key not in OUTPUT_NAMES:
                known = "; ".join(f"{name}: {what}" for name, what in OUTPUT_NAMES.items())
                raise ValueError(f"{key!r} is not an output cloudddp knows ({known})")
        return v

    @field_validator("inputs", "outputs")
    @classmethod
    def _channel_names(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key in v:
            if not re.match(r"^[A-Za-z][A-Za-z0-9_]{0,63}\Z", key):
                raise ValueError(f"name {key!r}: use letters, digits and '_', starting with a letter")
        return v

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key in v:
            if not _ENV_NAME.match(key):
                raise ValueError(f"{key!r} is not a valid environment variable name")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> JobSpec:
        d = self.distribution
        if d.backend == "smddp" and self.resources.gpus_per_node == 0:
            raise ValueError("distribution.backend smddp needs GPUs: set resources.gpus_per_node")
        if d.backend == "nccl" and self.resources.gpus_per_node == 0:
            raise ValueError("distribution.backend nccl needs GPUs: set resources.gpus_per_node, or use gloo")
        return self

    # -- conveniences every backend uses ---------------------------------------------------------
    @property
    def base_dir(self) -> Path:
        return self._base_dir

    @property
    def code_dir(self) -> Path:
        return (self._base_dir / self.code.dir).resolve()

    @property
    def total_gpus(self) -> int:
        return self.resources.nodes * self.resources.gpus_per_node

    @property
    def stall_seconds(self) -> int | None:
        """How long every rank may stay silent before the run fails as stalled (None: the watchdog is off)."""
        given = self.limits.stall_timeout
        if given == "off":
            return None
        return given if given is not None else STALL_FACTOR * self.distribution.collective_timeout

    def process_group_backend(self, *, on_gpu: bool) -> str:
        """The backend the training script initialises: ``auto`` resolved for the device."""
        if self.distribution.backend != "auto":
            return self.distribution.backend
        return "nccl" if on_gpu else "gloo"

    def section(self, backend: str) -> Any:
        """The options section of ``backend`` (``<backend>:`` in the spec; its defaults when left out)."""
        if backend in type(self).model_fields:
            return getattr(self, backend)
        if self._sections is None:
            raise ValueError(f"this spec's model has no backend sections to read {backend!r} from")
        return self._sections.options_model(backend)()

    def input_location(self, name: str, backend: str) -> str:
        """Where input ``name`` is for ``backend``: its ``at.<backend>`` entry, else its ``path``."""
        item = self.inputs[name]
        where = item.at.get(backend) or item.path
        if where is None:
            raise UserError(
                f"inputs.{name} has no location for the {backend} backend",
                hint=f"give inputs.{name}.path or inputs.{name}.at.{backend}",
            )
        return where

    def input_folder(self, name: str, where: str) -> Path:
        """A local input's folder, resolved against the spec file; a user error when it is not a folder."""
        folder = (self._base_dir / where).resolve()
        if not folder.is_dir():
            raise UserError(
                f"inputs.{name}: {folder} is not a folder", hint="input paths are relative to the spec file"
            )
        return folder


def spec_model(sections: Sections, wanted: Iterable[str] | None = None) -> type[JobSpec]:
    """The job spec with a section for registered backends (``<name>:`` validated by its options model):
    those named in ``wanted`` that are registered, or every registered one (None, for the JSON Schema).

    A document is validated with the sections it uses only, so loading a spec builds and imports no more
    than that; a section it leaves out reads as its backend's defaults. A plugin's section is validated,
    completed and reported on exactly like a built-in one.
    """
    registered = tuple(sections.names())
    chosen = registered if wanted is None else tuple(n for n in registered if n in set(wanted))
    return _spec_model(sections, chosen, registered)


@functools.cache
def _spec_model(sections: Sections, wanted: tuple[str, ...], registered: tuple[str, ...]) -> type[JobSpec]:
    fields: dict[str, Any] = {}
    for name in wanted:
        if name in JobSpec.model_fields:
            raise ValueError(f"backend {name!r} clashes with the spec field of the same name")
        options = sections.options_model(name)
        fields[name] = (options, Field(default_factory=options, description=f"Only the {name} backend reads this."))

    def backend_keys_into_at(value: Any) -> Any:
        """The earlier form ``inputs.X.<backend>: URI`` is read as ``inputs.X.at.<backend>: URI``."""
        if not isinstance(value, dict):
            return value
        return {name: _keys_into_at(item, registered) for name, item in value.items()}

    def check_at(value: dict[str, Input]) -> dict[str, Input]:
        for input_name, item in value.items():
            for backend in item.at:
                if backend not in registered:
                    guess = difflib.get_close_matches(backend, registered, n=1)
                    tip = f"; did you mean '{guess[0]}'?" if guess else ""
                    raise ValueError(
                        f"{input_name}.at.{backend}: no such backend{tip} (registered: {', '.join(registered)})"
                    )
        return value

    composed = create_model(
        "JobSpec",
        __base__=JobSpec,
        __module__=__name__,
        __validators__={
            "_inputs_backend_keys": field_validator("inputs", mode="before")(backend_keys_into_at),
            "_inputs_at_known_backends": field_validator("inputs")(check_at),
        },
        **fields,
    )
    composed._sections = sections
    return composed


def _keys_into_at(item: Any, registered: tuple[str, ...]) -> Any:
    if not isinstance(item, dict):
        return item
    moved = {k: v for k, v in item.items() if k in registered and k not in Input.model_fields}
    if not moved:
        return item
    rest = {k: v for k, v in item.items() if k not in moved}
    at = rest.get("at")
    return {**rest, "at": {**moved, **(at if isinstance(at, dict) else {})}}


def json_schema(sections: Sections) -> dict[str, Any]:
    """The JSON Schema editors use to complete and check job files."""
    schema = spec_model(sections).model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://cloudddp.dev/schema/job.json"
    return schema


EPOCHS_FLAG = "--epochs"


def _without_flag(args: list[str], flag: str) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == flag:
            skip = True
        elif not a.startswith(flag + "="):
            out.append(a)
    return out


def job_key(spec: JobSpec) -> str:
    """What makes two runs the same training for their step time: name, program and arguments but ``--epochs``."""
    what = {
        "name": spec.name,
        "entry": spec.code.entry,
        "command": spec.code.command,
        "args": _without_flag(list(spec.code.args), EPOCHS_FLAG),
    }
    return f"{spec.name}-{hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]}"


SHARED_SCRIPT_MARKER = b'SHARED_SCRIPT = "cloudddp-shared-train"'
"""The line that marks ``src_train/train.py`` (and copies of it) as cloudddp's shared script: the one whose
arguments the cost model reads and which checkpoints into ``CLOUDDDP_CHECKPOINT_DIR`` by itself."""


def is_shared_script(spec: JobSpec) -> bool:
    """The entry script is cloudddp's shared training script (it carries :data:`SHARED_SCRIPT_MARKER`)."""
    if spec.code.command is not None or not spec.code.entry:
        return False
    try:
        with open(spec.code_dir / spec.code.entry, "rb") as f:
            return SHARED_SCRIPT_MARKER in f.read(65_536)
    except OSError:
        return False
