"""The user configuration: each backend's settings kept once, outside every job (docs/configuration.md).

The file is found at ``$CLOUDDDP_CONFIG`` when set, else ``$CLOUDDDP_HOME/config.yaml`` when CLOUDDDP_HOME is set,
else ``$XDG_CONFIG_HOME/cloudddp/config.yaml`` (``~/.config/cloudddp/config.yaml``). Its top-level keys are backend
sections, each holding what that backend's section of a job spec takes, plus an optional ``backends:`` list: the
order ``-b auto`` tries when a job names none.

At load the file fills each backend section of the job key by key (:meth:`UserConfig.merge_into`), before
validation: a value the job gives wins, so does an ``-o`` override, and so does an environment variable the
backend reads for that key (its options model's ``env_fallbacks``). A value from the file that does not validate is
reported against the file and its line. The file is refused (exit 2) when another user owns it or others may write
it or its folder: a planted ``slurm.setup`` line would run as its reader.
"""

from __future__ import annotations

import copy
import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import BaseModel, ValidationError

from cloudddp.errors import UserError
from cloudddp.paths import open_trusted
from cloudddp.spec import load, size
from cloudddp.spec.model import JobSpec, Sections, spec_model

CONFIG_ENV = "CLOUDDDP_CONFIG"
ORDER_KEY = "backends"
WHAT = "the cloudddp configuration"


def config_path() -> Path:
    """Where the user configuration is (or would be): the lookup order of the module's docstring."""
    given = os.environ.get(CONFIG_ENV)
    if given:
        return Path(given).expanduser()
    home = os.environ.get("CLOUDDDP_HOME")
    if home:
        return Path(home) / "config.yaml"
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".config"  # the XDG spec ignores a relative one
    return base / "cloudddp" / "config.yaml"


def shown(path: Path) -> str:
    """``path`` as a person writes it: ``~/.config/cloudddp/config.yaml`` under the home folder."""
    try:
        return "~/" + str(path.relative_to(Path.home()))
    except ValueError:
        return str(path)


class ConfigError(UserError):
    """A user configuration that does not validate: one line per problem, each with the file and line."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.problems = problems
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        super().__init__(
            f"{source}: {count} in {WHAT}:\n  - " + "\n  - ".join(problems),
            hint=f"fix the file (docs/configuration.md lists what it takes), or set {CONFIG_ENV} to another file",
        )


@dataclass(frozen=True)
class UserConfig:
    """A user configuration whose keys are checked (its sections are when used: :meth:`validated`): each backend's
    settings as written, with the line of every key."""

    path: Path
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    """``backends:`` as written; empty when the file has none."""
    lines: dict[load.Loc, int] = field(default_factory=dict)

    @property
    def backends(self) -> list[str]:
        """The backends ``-b auto`` may place a job on when the job names none: ``backends:``, else every backend
        the file has a section for, in the file's order."""
        return list(self.order or self.settings)

    def merge_into(self, job: dict[str, Any], positions: load.Positions, sections: Sections) -> Deferred:
        """Fill the backend sections ``job`` has (plain data, after the overrides, before validation) with this
        file's settings they leave out, key by key, recording each key's line in ``positions`` so that an error names
        this file. The sections the job lacks are left for when a backend asks for its own (:class:`Deferred`):
        loading a job imports no backend it does not name."""
        deferred = Deferred(self, sections)
        for name in self.settings:
            own = job.get(name)
            if own is None:
                deferred.names.add(name)
            elif isinstance(own, dict):  # anything else is the job's own mistake, reported against the job
                deferred.came.update(self.fill(name, own, sections.options_model(name), positions))
        return deferred

    def fill(
        self, name: str, own: dict[str, Any], model: type[BaseModel], positions: load.Positions | None
    ) -> dict[str, str]:
        """Put this file's ``name`` settings that ``own`` (a section's data) lacks into it; returns where each
        such setting (``sagemaker.role``) comes from: this file, or the environment variable the backend reads for
        it, which wins (``model.env_fallbacks``)."""
        came: dict[str, str] = {}
        fallbacks: Mapping[str, tuple[str, ...]] = getattr(model, "env_fallbacks", {})
        for key, value in self.settings[name].items():
            if key in own:
                continue
            env = next((v for v in fallbacks.get(key, ()) if os.environ.get(v)), None)
            if env:
                came[f"{name}.{key}"] = f"{env} in the environment, over {shown(self.path)}"
                continue
            own[key] = copy.deepcopy(value)
            came[f"{name}.{key}"] = shown(self.path)
            for loc, line in self.lines.items():
                if positions is not None and loc[:2] == (name, key):
                    positions.sources[loc] = f"{shown(self.path)}:{line}"
        return came

    def validated(self, sections: Sections, values: dict[str, Any]) -> JobSpec:
        """A spec holding ``values`` (backend sections of this file, or all of it) checked, each problem with its
        line of this file: a :class:`ConfigError` else."""
        document = {"name": "user-config", **values}
        positions = load.Positions(shown(self.path))
        positions.lines.update(self.lines)
        try:
            return spec_model(sections, values).model_validate(document)
        except ValidationError as e:
            problems = dict.fromkeys(load.describe(err, document, positions, sections) for err in e.errors())
            raise ConfigError(shown(self.path), list(problems)) from None

    def check(self, sections: Sections) -> None:
        """Every section of the file checked at once (``config show``, ``check``); a :class:`ConfigError` else."""
        self.validated(sections, self.settings)


@dataclass
class Deferred:
    """The user configuration's part of one job: where the settings merged into its sections came from, and the
    configured sections the job lacks, read (and checked, against the file's lines) when a backend asks for one."""

    config: UserConfig
    sections: Sections
    names: set[str] = field(default_factory=set)
    came: dict[str, str] = field(default_factory=dict)

    def options(self, name: str) -> Any:
        """Backend ``name``'s section from the file alone, checked against the file's lines."""
        return self._section(name)[0]

    def _section(self, name: str) -> tuple[Any, dict[str, str]]:
        """Backend ``name``'s section from the file alone, and where each of its settings came from."""
        values: dict[str, Any] = {}
        came = self.config.fill(name, values, self.sections.options_model(name), None)
        return getattr(self.config.validated(self.sections, {name: values}), name), came

    def notes(self, backend: str) -> list[str]:
        """The plan's lines on where ``backend``'s settings came from when the job did not give them, one per
        source: this file, or the environment variable that beat it."""
        came = self._section(backend)[1] if backend in self.names else self.came
        by_source: dict[str, list[str]] = {}
        for key, source in came.items():
            if key.split(".", 1)[0] == backend:
                by_source.setdefault(source, []).append(key)
        return [f"{', '.join(keys)} from {source}" for source, keys in by_source.items()]


def read_config(sections: Sections, path: Path | None = None) -> UserConfig | None:
    """The user configuration at ``path`` (default: :func:`config_path`), checked against the registered backends'
    sections; None when there is no such file (a ``$CLOUDDDP_CONFIG`` that names none is an error). The file is
    opened once, judged on that descriptor (:func:`cloudddp.paths.open_trusted`) and those bytes parsed; the same
    unchanged file is parsed once per process (one command)."""
    path = path or config_path()
    source = shown(path)
    fix = f"if it is yours and nobody else wrote in it: chmod 600 {path}; or set {CONFIG_ENV} to another"
    try:
        fd, _ = open_trusted(path, WHAT, fix=fix)
    except FileNotFoundError:
        if os.environ.get(CONFIG_ENV):
            raise UserError(
                f"{CONFIG_ENV}={path}: no such file", hint=f"unset {CONFIG_ENV}, or point it at your config.yaml"
            ) from None
        return None
    except OSError as e:
        raise UserError(f"{source}: cannot read {WHAT}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        identity = (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if identity in _PARSED:
            return _PARSED[identity]
        raw = read_bytes(f, source)
    config = _parsed(path, raw, sections)
    _PARSED.clear()
    _PARSED[identity] = config
    return config


_PARSED: dict[tuple[object, ...], UserConfig] = {}
"""The last file parsed, under its identity (path, device, inode, size, times) as its descriptor said."""


def read_bytes(f: BinaryIO, source: str) -> bytes:
    """The open file's bytes; one larger than a spec may be is refused."""
    try:
        raw = f.read(size.MAX_BYTES + 1)
    except OSError as e:
        raise UserError(f"{source}: cannot read {WHAT}: {e.strerror}") from None
    if len(raw) > size.MAX_BYTES:
        raise UserError(f"{source}: larger than {size.MAX_BYTES:,} bytes, too large for {WHAT}")
    return raw


def _parsed(path: Path, raw: bytes, sections: Sections) -> UserConfig:
    """The file's bytes as a configuration; every problem at once (its keys, and the settings of each backend
    section it has), each with its line: a :class:`ConfigError` else."""
    source = shown(path)
    text = raw.decode("utf-8-sig", errors="replace") if raw.strip() else ""
    if not any(line.strip() and not line.lstrip().startswith("#") for line in text.splitlines()):
        return UserConfig(path)  # empty, or comments only: no settings yet
    data, positions, problems = load.parse_yaml(load.decode(raw, source), source)
    problems += _top_level_problems(data, positions, sections.names())
    names = sections.names()
    order = data.get(ORDER_KEY)
    config = UserConfig(
        path,
        settings={k: v for k, v in data.items() if k in names and isinstance(v, dict)},
        order=list(order) if isinstance(order, list) else [],
        lines=positions.lines,
    )
    if problems:
        try:  # the sections' own settings too, so that one mistake does not hide the others
            config.check(sections)
        except ConfigError as e:
            problems += [p for p in e.problems if p not in problems]
        raise ConfigError(source, problems)
    return config


def _top_level_problems(data: dict[str, Any], positions: load.Positions, names: list[str]) -> list[str]:
    """What is wrong with the file's keys, each with its line: one that is not a backend (with the nearest), a
    section that is not a mapping, a ``backends:`` entry that is not registered. A section's own settings are
    checked when its backend is used (:meth:`UserConfig.validated`): reading the file imports no backend."""
    issues = []
    for key, value in data.items():
        where = positions.where((key,))
        if key == ORDER_KEY:
            issues += _order_problems(value, positions, names)
        elif key not in names:
            guess = difflib.get_close_matches(key, [ORDER_KEY, *names], n=1, cutoff=0.6)
            tip = f"; did you mean '{guess[0]}'?" if guess else ""
            issues.append(f"{where}: {key}: not a backend{tip} (valid here: {', '.join([ORDER_KEY, *names])})")
        elif not isinstance(value, dict):
            issues.append(f"{where}: {key}: give the {key} backend's settings as a mapping, e.g. {key}: {{key: value}}")
    return issues


def _order_problems(value: Any, positions: load.Positions, names: list[str]) -> list[str]:
    """``backends:`` is a list of registered backends, each named once."""
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        return [f"{positions.where((ORDER_KEY,))}: {ORDER_KEY}: give a list of backends, e.g. [slurm, sagemaker]"]
    issues = []
    for i, name in enumerate(value):
        where = f"{positions.where((ORDER_KEY, i))}: {ORDER_KEY}[{i}]"
        if name in value[:i]:
            issues.append(f"{where}: {name!r} is named twice")
        elif name not in names:
            guess = difflib.get_close_matches(name, names, n=1)
            tip = f"; did you mean '{guess[0]}'?" if guess else ""
            issues.append(f"{where}: no backend {name!r}{tip} (registered: {', '.join(names)})")
    return issues
