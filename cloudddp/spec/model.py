"""The job spec: one declarative description of a DDP training job that every backend reads.

The model is strict (unknown keys are errors) so that a typo never silently changes a job. Paths in
the spec are relative to the spec file; :func:`cloudddp.spec.load.load_spec` resolves them. The sections a job is
made of are in :mod:`cloudddp.spec.sections` (each named here too: ``from cloudddp.spec.model import Strict``);
here is :class:`JobSpec`, the checks that span sections, its composition with the backends' sections
(:func:`spec_model`), and what the rest of cloudddp asks of a spec (:func:`job_key`, :func:`is_shared_script`).
Its annotations are evaluated as its classes are made, as in :mod:`cloudddp.spec.sections` (which says why).
"""

import difflib
import functools
import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, ClassVar, Protocol

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model, field_validator, model_validator
from typing_extensions import Self

from cloudddp.errors import UserError
from cloudddp.spec.placeholders import unknown
from cloudddp.spec.sections import (
    HIDDEN,
    MIN_SECRET_CHARS,
    OUTPUT_NAMES,
    REVEAL_SECRETS,
    Checkpoint,
    Code,
    Distribution,
    EnvEntry,
    EnvValue,
    Input,
    Limits,
    Metrics,
    MetricSpec,
    Output,
    Resources,
    Strict,
    empty_list,
    validate_regex,
)
from cloudddp.spec.values import MAX_SECONDS, Duration, DurationOrOff, parse_duration

__all__ = [
    "EPOCHS_FLAG",
    "HIDDEN",
    "MAX_SECONDS",
    "MIN_SECRET_CHARS",
    "OUTPUT_NAMES",
    "REVEAL_SECRETS",
    "SHARED_SCRIPT_MARKER",
    "STALL_FACTOR",
    "Checkpoint",
    "Code",
    "Distribution",
    "Duration",
    "DurationOrOff",
    "EnvEntry",
    "EnvValue",
    "Input",
    "JobSpec",
    "Limits",
    "MetricSpec",
    "Metrics",
    "Output",
    "Resources",
    "Sections",
    "Strict",
    "empty_list",
    "is_shared_script",
    "job_key",
    "json_schema",
    "parse_duration",
    "spec_model",
    "validate_regex",
]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,62}\Z")  # \Z: `$` also matches before a final newline
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
STALL_FACTOR = 2
"""``limits.stall_timeout`` defaults to this many collective timeouts: a script that passes the collective timeout
to ``init_process_group`` fails by itself first, and the watchdog catches the scripts that do not."""


def _metrics_section(v: Any) -> Any:
    """``metrics: [...]`` is the short form of ``metrics: {declared: [...]}``."""
    return {"declared": v} if isinstance(v, list) else v


class Sections(Protocol):
    """Where the backends' sections of the spec come from. The spec does not know which backends exist: the
    backend plugins, above it, passes itself (:data:`cloudddp.backends.plugins.SECTIONS`)."""

    def names(self) -> list[str]:
        """Every registered backend's name, sorted."""
        ...

    def options_model(self, name: str) -> type[BaseModel]:
        """The options model of backend ``name`` (its ``<name>:`` section)."""
        ...

    def __hash__(self) -> int:
        """Composed models are cached per source of sections."""
        ...


class Configured(Protocol):
    """The user configuration's part of one job (:class:`cloudddp.spec.userconfig.Deferred`): its sections the job
    lacks, read when a backend asks, and where the settings it gave came from."""

    names: set[str]
    """The configured backend sections the job lacks."""

    def options(self, name: str) -> Any:
        """Backend ``name``'s section from the configuration alone, checked."""
        ...

    def notes(self, backend: str) -> list[str]:
        """The plan's lines on where ``backend``'s settings came from."""
        ...


class JobSpec(Strict):
    """A DDP training job. The same spec runs on every backend."""

    # Built on first use: a job is validated by the composed model (:func:`spec_model`), never by this base.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, title="cloudddp job spec", defer_build=True)

    name: str = Field(description="Job name: letters, digits and '-', at most 63 characters.")
    description: str | None = Field(None, description="Free text, for people.")
    code: Code = Field(default_factory=Code)
    inputs: dict[str, Input] = Field(
        default_factory=dict,
        description="Data the job reads, by name: each a local folder (uploaded) or a cloud URI; the script gets its "
        "path through its `arg` and CLOUDDDP_INPUT_<NAME>.",
    )
    outputs: dict[str, Output] = Field(
        default_factory=dict, description="Where the job's outputs go, by name: `model`, `tensorboard`."
    )
    resources: Resources = Field(default_factory=Resources)
    distribution: Distribution = Field(default_factory=Distribution)
    env: dict[str, EnvEntry] = Field(
        default_factory=dict,
        description="Environment variables every process gets, by name: a string, or {value | from_env, secret}.",
    )
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    metrics: Annotated[
        Metrics, BeforeValidator(_metrics_section, json_schema_input_type=list[MetricSpec] | Metrics)
    ] = Field(
        default_factory=Metrics,
        description="Metrics the script prints in its own words (CLOUDDDP_METRIC lines are always read): a list, "
        "read from global rank 0's output, or {declared: [...], ranks: all} to read every rank's.",
    )
    limits: Limits = Field(default_factory=Limits)
    backends: list[str] = Field(
        default_factory=empty_list,
        max_length=8,
        description="The backends `-b auto` may place the job on, most preferred first (default: every backend "
        "the user configuration sets up): it ranks them by estimated whole cost and start time and moves to the "
        "next on a capacity or quota failure (docs/placement.md).",
    )
    tags: dict[str, str] = Field(
        default_factory=dict, description="Carried to the cloud job's tags where the backend has them."
    )

    # Set by the loader: the folder relative paths are resolved against. Not part of the schema.
    _base_dir: Path = Path(".")
    _user_config: Configured | None = None
    """The user configuration's part of this job (set by the loader): what it filled in, and its sections the job
    lacks, read when a backend asks for its own (:mod:`cloudddp.spec.userconfig`)."""
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

    @field_validator("backends")
    @classmethod
    def _distinct_backends(cls, v: list[str]) -> list[str]:
        twice = sorted({name for name in v if v.count(name) > 1})
        if twice:
            raise ValueError(f"backend {twice[0]!r} is named twice")
        if "auto" in v:
            raise ValueError("name the backends -b auto chooses from (e.g. [sagemaker, azureml]); 'auto' is not one")
        known = cls._sections.names() if cls._sections is not None else None
        for name in v:
            if known is not None and name not in known:
                guess = difflib.get_close_matches(name, known, n=1)
                tip = f"did you mean {guess[0]!r}? " if guess else ""
                raise ValueError(f"{name!r} is not a registered backend; {tip}(registered: {', '.join(known)})")
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
    def _consistent(self) -> Self:
        d = self.distribution
        if d.backend == "smddp" and self.resources.gpus_per_node == 0:
            raise ValueError("distribution.backend smddp needs GPUs: set resources.gpus_per_node")
        if d.backend == "nccl" and self.resources.gpus_per_node == 0:
            raise ValueError("distribution.backend nccl needs GPUs: set resources.gpus_per_node, or use gloo")
        self._known_placeholders()
        return self

    def _known_placeholders(self) -> None:
        """Every ``{{inputs.NAME}}`` names one of the job's inputs (the sections check the other names, with
        their lines: :mod:`cloudddp.spec.placeholders`), so a typo fails here and not on the cloud."""
        words = [("code.command", w) for w in self.code.command or ()] + [("code.args", w) for w in self.code.args]
        words += [(f"env.{k}", e.value) for k, e in self.env.items() if e.value is not None and not e.secret]
        for where, text in words:
            why = unknown(text, self.inputs)
            if why:
                raise ValueError(f"{where}: {why}")

    # -- conveniences every backend uses ---------------------------------------------------------
    @property
    def base_dir(self) -> Path:
        return self._base_dir

    def settings_notes(self, backend: str) -> list[str]:
        """The plan's lines on where ``backend``'s settings came from when the job did not give them, one per
        source: the user configuration's file, or the environment variable that beat it (:mod:`.userconfig`)."""
        return self._user_config.notes(backend) if self._user_config else []

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
        if self._user_config and backend in self._user_config.names:
            return self._user_config.options(backend)
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
