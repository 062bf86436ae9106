"""A Plan: everything a backend would send, decided before anything is sent.

``render`` builds it without network or credentials; ``launch`` sends exactly it and never reads the spec
again. Values only known at launch are placeholders in the plan, filled by the one binding step:

- late values (``{ACCOUNT}``, ``{RUN_DIR}``, ``{PORT}``): :meth:`Plan.bind` fills them and returns a plan
  that is still safe to print and store;
- environment values that are secret or read from the submitting shell (``<secret:NAME>``,
  ``<from_env:VAR>``): :meth:`Plan.reveal` fills them in a copy that is sent and never stored.

So what ``cloudddp render`` and ``--dry-run`` print is the plan, and the dry run never differs from the
real request.

The request is typed by its backend: the clouds' is their own request as a dict (``Plan[dict[str, Any]]``),
a backend that invents its own shape (Slurm's, local's) declares it as a :class:`JsonDataclass`, which the
binding step fills field by field and :meth:`Plan.from_state` reads back typed.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, cast

from typing_extensions import Self, TypeVar

from cloudddp.errors import UserError

SECRET_PLACEHOLDER = "<secret:{name}>"
MIN_SECRET_CHARS = 8
"""A shorter secret cannot be told apart from ordinary output (redacting it would blank common words), so
it is refused instead of being left in the logs."""
FROM_ENV_PLACEHOLDER = "<from_env:{var}>"


def late(name: str) -> str:
    """The placeholder of a value bound at launch, e.g. ``late("ACCOUNT") == "{ACCOUNT}"``."""
    return "{" + name + "}"


def substitute(value: Any, table: Mapping[str, str]) -> Any:
    """``value`` (JSON-like data, or a :class:`JsonDataclass` of it) with every occurrence of each key of ``table``
    replaced, structurally."""
    if isinstance(value, str):
        for key, sub in table.items():
            if key in value:
                value = value.replace(key, sub)
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(substitute(v, table) for v in value)
    if isinstance(value, dict):
        return {k: substitute(v, table) for k, v in value.items()}
    if isinstance(value, JsonDataclass):
        fields = {f.name: substitute(getattr(value, f.name), table) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **fields)
    return value


@dataclass(frozen=True)
class JsonDataclass:
    """A frozen dataclass a backend writes as JSON and reads back typed: a request of its own shape (Slurm's
    batch request, local's torchrun request) or a run's record. Its fields are JSON values, tuples, other
    JsonDataclasses or None."""

    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}
    """How :meth:`from_dict` reads it: an unknown key is an error (pydantic reads a dataclass's config here)."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (tuples as lists)."""
        data: dict[str, Any] = _plain(dataclasses.asdict(self))
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """The instance :meth:`to_dict` wrote (unknown keys are refused: a misspelt one is a bug, not data)."""
        found: Self = _adapter(cast(Hashable, cls)).validate_python(dict(data))
        return found

    @classmethod
    def from_fields(cls, data: Mapping[str, Any]) -> Self:
        """The instance from a mapping that holds its fields among others (a run record's info, where the base
        class and the runner keep their own keys too); a field the mapping lacks keeps its default (a record
        written before the field existed)."""
        return cls.from_dict({f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


@functools.cache
def _adapter(cls: Any) -> Any:
    from pydantic import TypeAdapter  # only where a stored request is read back: never at render

    return TypeAdapter(cls)


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


PARTS = ("startup", "training", "checkpoint", "shutdown", "idle")
"""The billed parts of a job, in the order they happen (each has ``<part>_s`` and ``<part>_cost`` in an
:class:`Estimate`)."""


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """What a plan says its job will take and cost: one name per figure, in seconds (``*_s``, per node) and USD
    for all nodes (``*_cost``, ``price_per_hour``). The catalog's cost model fills every figure for a priced cloud
    size whose steps it knows; for a script whose speed it cannot know, a priced size has its price and no more;
    a run on this machine knows its training only. A figure nobody knows is None."""

    images_per_s_per_gpu: float | None = None
    step_s: float | None = None
    compute_s: float | None = None
    """Modelled compute per step (None: the model does not know the network)."""
    comm_s: float | None = None
    exposed_comm_s: float | None = None
    efficiency: float | None = None
    epoch_s: float | None = None
    provision_unbilled_s: float | None = None
    """Waiting for nodes that is not billed (SageMaker before TrainingStartTime)."""
    startup_s: float | None = None
    """Billed, per node."""
    training_s: float | None = None
    checkpoint_s: float | None = None
    shutdown_s: float | None = None
    idle_s: float | None = None
    billed_s: float | None = None
    """Per node, rounded up to the billing increment."""
    job_s: float | None = None
    """Wall clock from the request to the end of the job."""
    price_per_hour: float | None = None
    """All nodes."""
    startup_cost: float | None = None
    training_cost: float | None = None
    checkpoint_cost: float | None = None
    shutdown_cost: float | None = None
    idle_cost: float | None = None
    total_cost: float | None = None
    """The whole job."""
    cost_per_epoch: float | None = None
    steps: float | None = None
    """Optimizer steps of the whole job."""
    step_basis: str | None = None
    """Where ``step_s`` comes from: ``model`` (the cost model), or a measured or given step time's basis."""
    size: str | None = None
    """The size it prices (None: this machine)."""
    nodes: int | None = None
    price_kind: str | None = None
    """Where the price comes from (the catalog's ``price_kind``: ``ec2-proxy`` is EC2's on-demand price standing in
    for SageMaker's, a lower bound)."""
    price_region: str | None = None
    """The region whose price it is, when the catalog has none for the size where the job runs (shown ``~REGION``
    beside each figure); None: the price is the job's region's. Left out of :meth:`to_dict` while None."""

    def rounded(self) -> Estimate:
        """This estimate to six decimals, as a plan holds it and a run's record keeps it."""
        return Estimate.from_dict(self.to_dict())

    def to_dict(self) -> dict[str, float | int | str | None]:
        figures = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in self.__dict__.items()}
        return figures if self.price_region is not None else {k: v for k, v in figures.items() if k != "price_region"}

    @property
    def region_mark(self) -> str:
        """`` ~REGION`` after a figure priced in another region than the job's; empty otherwise."""
        return f" ~{self.price_region}" if self.price_region else ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Estimate:
        """The estimate :meth:`to_dict` wrote (a run's record); a figure it does not know is left out."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def breakdown(self) -> dict[str, tuple[float, float | None]]:
        """Seconds and cost of each billed part, in the order they happen."""
        return {p: (getattr(self, f"{p}_s") or 0.0, getattr(self, f"{p}_cost")) for p in PARTS}


RequestT = TypeVar("RequestT", default=Any)
"""A plan's request type: ``dict[str, Any]`` for a cloud's own request, a :class:`JsonDataclass` otherwise."""


def request_data(request: Any) -> Any:
    """A request as JSON data: a :class:`JsonDataclass`'s dict, or the native dict as it is."""
    return request.to_dict() if isinstance(request, JsonDataclass) else request


@dataclass(frozen=True)
class EnvSource:
    """Where environment variable ``name`` comes from at launch: the submitting shell's ``var``, or a
    literal ``value`` kept out of every artefact because it is secret."""

    name: str
    var: str | None = None
    value: str | None = field(default=None, repr=False)
    secret: bool = False

    @property
    def placeholder(self) -> str:
        return SECRET_PLACEHOLDER.format(name=self.name) if self.secret else FROM_ENV_PLACEHOLDER.format(var=self.var)


@dataclass(frozen=True)
class Target(JsonDataclass):
    """Where a plan's request goes besides the request itself (a region, a workspace, a login host) and where its
    training keeps checkpoints: what launch needs, and what a run that moves carries from. Each backend declares its
    own (``Backend.target_type``), a frozen dataclass of its fields; a run's record keeps it as :meth:`to_dict`
    writes it and reads it back with :meth:`~JsonDataclass.from_fields` (among the record's other keys)."""

    omitted_when_none: ClassVar[frozenset[str]] = frozenset({"checkpoints"})
    """The fields :meth:`to_dict` leaves out while they are None."""

    @property
    def checkpoints(self) -> str | None:
        """The training's checkpoint folder as the backend names it (a path here, an ``s3://`` or
        ``azureml://`` URI, a path on the cluster); None: checkpointing is off."""
        return None

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        return {k: v for k, v in data.items() if not (v is None and k in self.omitted_when_none)}


@dataclass(frozen=True)
class Folder(Target):
    """A target that is only a checkpoint folder (the local backend's, a plugin's)."""

    checkpoints: str | None = None


TargetT = TypeVar("TargetT", bound=Target, default=Target)
"""A plan's target type: the backend's :class:`Target`."""


@dataclass
class Plan(Generic[RequestT, TargetT]):
    """What a backend would send for one job: its request and documents, the decisions and warnings that explain
    them, the estimate, the uploads and the target, and what launch fills in or resolves (see the module)."""

    backend: str
    job_name: str
    request: RequestT
    """The native request, with late values and secrets as placeholders."""
    documents: dict[str, str] = field(default_factory=dict)
    """File name -> text, as the backend's own tools read them (job YAML, request JSON, a shell script)."""
    decisions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    estimate: Estimate | None = None
    uploads: list[dict[str, Any]] = field(default_factory=list)
    """What is uploaded before the request (content-addressed: unchanged snapshots are skipped)."""
    target: TargetT = field(default_factory=Folder)  # type: ignore[assignment]
    """Where the request goes (region, workspace, ...) and where the training keeps checkpoints: what launch needs
    besides the request."""
    job: dict[str, Any] = field(default_factory=dict)
    """The job spec as data, secrets redacted (stored next to a run)."""
    late: tuple[str, ...] = ()
    """Names of the values :meth:`bind` must fill, e.g. ``("ACCOUNT",)``."""
    metrics: list[dict[str, str]] = field(default_factory=list)
    """Metrics the job declares by regular expression (``{"name", "regex"}``), read from its log lines."""
    metric_ranks: str = "0"
    """Whose lines metrics are read from: ``"0"`` (global rank 0's) or ``"all"`` (``metrics.ranks``)."""
    step_key: str = ""
    """Which measured step times this job's runs teach and use (:func:`cloudddp.catalog.stepstore.job_key`)."""
    max_cost: float | None = None
    """The job's budget in USD (``resources.max_cost``), kept with the run for ``cloudddp cost`` and the budget
    watch."""
    env_sources: dict[str, EnvSource] = field(default_factory=dict, repr=False, compare=False)
    """Environment values resolved at launch (never serialised)."""

    # -- the binding step ----------------------------------------------------------------------
    def bind(self, values: Mapping[str, str]) -> Self:
        """This plan with its late values filled (names as in :attr:`late`); still free of secrets."""
        missing = [name for name in self.late if name not in values]
        unknown = [name for name in values if name not in self.late]
        if missing or unknown:
            raise ValueError(f"bind: missing {missing}, not late-bound here {unknown}")
        table = {late(name): str(value) for name, value in values.items()}
        return dataclasses.replace(
            self,
            request=substitute(self.request, table),
            documents=substitute(self.documents, table),
            uploads=substitute(self.uploads, table),
            target=substitute(self.target, table),
            late=(),
        )

    def renamed(self, new_name: str) -> Self:
        """This plan under another job name (every occurrence in the request and documents), e.g. for a
        recovery's next attempt."""
        table = {self.job_name: new_name}
        return dataclasses.replace(
            self,
            job_name=new_name,
            request=substitute(self.request, table),
            documents=substitute(self.documents, table),
        )

    def reveal(self, value: Any, environ: Mapping[str, str] | None = None) -> Any:
        """``value`` (a part of the bound request) with secret and ``from_env`` values filled in, to send only."""
        if self.late:
            raise ValueError(f"reveal before bind: {', '.join(self.late)} not bound")
        return substitute(value, self._env_table(environ))

    def secret_values(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """The secret values this plan sends (for redacting output), longest first."""
        table = self._env_table(environ)
        secret = [s for s in self.env_sources.values() if s.secret and table.get(s.placeholder)]
        short = [s.name for s in secret if len(table[s.placeholder]) < MIN_SECRET_CHARS]
        if short:
            raise UserError(
                f"env.{short[0]}: the secret's value has fewer than {MIN_SECRET_CHARS} characters, too few to "
                "tell it apart from ordinary output, so it could not be kept out of the logs",
                hint=f"use a secret of {MIN_SECRET_CHARS} characters or more, or drop `secret: true` if it is not one",
            )
        return sorted((table[s.placeholder] for s in secret), key=len, reverse=True)

    def _env_table(self, environ: Mapping[str, str] | None) -> dict[str, str]:
        import os

        environ = os.environ if environ is None else environ
        table: dict[str, str] = {}
        missing = []
        for name, source in self.env_sources.items():
            if source.var is not None:
                if source.var not in environ:
                    missing.append(f"env.{name} reads ${source.var}, which is not set in this shell")
                    continue
                table[source.placeholder] = environ[source.var]
            elif source.value is None and source.secret:  # never "": a relaunch without it would run wrongly
                missing.append(
                    f"env.{name} is a secret given as a literal in the spec, and this process was not given it "
                    "(secrets are never stored)"
                )
            else:
                table[source.placeholder] = source.value or ""
        if missing:
            raise UserError("; ".join(missing), hint="export the variable before submitting, or give env.<NAME>.value")
        return table

    # -- showing it ----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "job_name": self.job_name,
            "request": request_data(self.request),
            "documents": self.documents,
            "decisions": self.decisions,
            "warnings": self.warnings,
            "estimate": self.estimate.to_dict() if self.estimate else None,
            "uploads": self.uploads,
            "target": self.target.to_dict(),
            "late_bound": list(self.late),
            "metrics": self.metrics,
            "metric_ranks": self.metric_ranks,
            "step_key": self.step_key,
            "max_cost": self.max_cost,
        }

    def to_state(self) -> dict[str, Any]:
        """Everything needed to launch this plan again later (no secret value: a secret given as a literal
        in the spec is kept only as its name, and must be supplied again to :meth:`from_state`)."""
        return {
            **self.to_dict(),
            "job": self.job,
            "late": list(self.late),
            "env_sources": [{"name": s.name, "var": s.var, "secret": s.secret} for s in self.env_sources.values()],
        }

    @classmethod
    def from_state(
        cls,
        state: Mapping[str, Any],
        literals: Mapping[str, str] | None = None,
        request_type: type[JsonDataclass] | None = None,
        target_type: type[Target] = Folder,
    ) -> Plan[Any, Any]:
        """The plan :meth:`to_state` saved; ``literals``: the values of secrets given as literals; ``request_type``:
        the backend's own request class (None: the request is the cloud's native dict); ``target_type``: the
        backend's target class."""
        sources = {
            s["name"]: EnvSource(s["name"], s["var"], (literals or {}).get(s["name"]), s["secret"])
            for s in state.get("env_sources", [])
        }
        request: Any = request_type.from_dict(state["request"]) if request_type else state["request"]
        return cls(
            backend=state["backend"],
            job_name=state["job_name"],
            request=request,
            documents=state["documents"],
            decisions=state["decisions"],
            warnings=state["warnings"],
            estimate=Estimate.from_dict(state["estimate"]) if state["estimate"] else None,
            uploads=state["uploads"],
            target=cast(Any, target_type.from_fields(state["target"])),
            job=state["job"],
            late=tuple(state["late"]),
            metrics=state["metrics"],
            metric_ranks=state.get("metric_ranks", "0"),
            env_sources=sources,
            step_key=state.get("step_key", ""),
            max_cost=state.get("max_cost"),
        )

    def literal_secret_names(self) -> list[str]:
        """The secrets this plan sends that were given as literals in the spec (what a relaunch must be given)."""
        return [s.name for s in self.env_sources.values() if s.secret and s.var is None]

    def literal_secrets(self) -> dict[str, str]:
        """The secrets given as literals in the spec (not read from the shell), by name: what
        :meth:`from_state` needs back."""
        return {s.name: s.value for s in self.env_sources.values() if s.var is None and s.value is not None}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    def _language(self, name: str) -> str:
        return {"json": "json", "yml": "yaml", "yaml": "yaml", "sh": "bash"}.get(name.rsplit(".", 1)[-1], "text")

    def _repr_markdown_(self) -> str:
        """How a notebook shows a plan: decisions, warnings, estimate, then each document as a code block."""
        parts = [f"**{self.backend}** plan for `{self.job_name}`"]
        parts += [f"- {d}" for d in self.decisions]
        parts += [f"- ⚠️ {w}" for w in self.warnings]
        if self.estimate:
            parts.append(
                "- estimate: "
                + ", ".join(
                    f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in self.estimate.to_dict().items()
                    if v is not None
                )
            )
        for name, body in self.documents.items():
            parts.append(f"`{name}`\n```{self._language(name)}\n{body.rstrip()}\n```")
        return "\n\n".join(parts)

    def _repr_html_(self) -> str:
        import html  # only notebooks call this; every render would otherwise pay its import

        items = "".join(f"<li>{html.escape(d)}</li>" for d in self.decisions)
        items += "".join(f"<li style='color:#b45309'>warning: {html.escape(w)}</li>" for w in self.warnings)
        docs = "".join(
            f"<details open><summary><code>{html.escape(name)}</code></summary><pre>{html.escape(body)}</pre></details>"
            for name, body in self.documents.items()
        )
        title = f"<b>{html.escape(self.backend)}</b> plan for <code>{html.escape(self.job_name)}</code>"
        return f"<div>{title}<ul>{items}</ul>{docs}</div>"

    def __str__(self) -> str:
        return self.text()

    def text(self) -> str:
        """The documents, one after another, headed by their names (what ``render`` prints)."""
        parts = []
        for name, body in self.documents.items():
            parts.append(f"# --- {name}\n{body.rstrip()}\n")
        return "\n".join(parts)
