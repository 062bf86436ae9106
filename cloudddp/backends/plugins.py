"""The registered backends, and the full job spec composed from their sections.

A backend is registered by any installed distribution, cloudddp's own included::

    [project.entry-points."cloudddp.backends"]
    slurm = "mypkg.slurm:SlurmBackend"

Only names are read to list them (``cloudddp backends``, ``--backend`` help, completion); a backend's
module is imported when the backend is used, and imports its cloud SDK only where it talks to the cloud.
The names come from :mod:`cloudddp.backends.installed`, which caches the scan of the installed distributions.

The spec does not know the backends: :data:`SECTIONS` is what the plugins give it, and the loaders here
(:func:`load_spec`, :func:`spec_from_dict`, :func:`spec_from_bytes`, :func:`json_schema`) are the spec's own
with the registered sections and the user configuration (:func:`user_config`) attached.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from cloudddp.backends import installed
from cloudddp.backends.base import Backend
from cloudddp.errors import UserError
from cloudddp.spec import load, model, userconfig
from cloudddp.spec.model import JobSpec
from cloudddp.spec.userconfig import UserConfig

GROUP = installed.BACKENDS


def names() -> list[str]:
    """Every registered backend's name, sorted."""
    return list(installed.entry_points(GROUP))


def backend_class(name: str) -> type[Backend[Any]]:
    """The class registered as ``name``; a UserError with a did-you-mean for an unknown name."""
    entry = installed.entry_points(GROUP).get(name)
    if entry is None and name == "auto":
        raise UserError(
            "-b auto chooses a backend when a job is submitted: `cloudddp submit JOB -b auto --dry-run` shows the "
            "ranking and the request it would send",
            hint="here, name one backend (`cloudddp backends` lists them)",
        )
    if entry is None:
        guess = difflib.get_close_matches(name, names(), n=1)
        tip = f"; did you mean '{guess[0]}'?" if guess else ""
        raise UserError(
            f"unknown backend {name!r}{tip} (registered: {', '.join(names()) or 'none'})",
            hint=f"`cloudddp backends` lists them; a plugin registers in the entry-point group {GROUP!r}",
        )
    cls = installed.load("backend", name, entry)
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise UserError(f"backend {name!r} ({entry}) is not a cloudddp Backend subclass")
    if cls.name != name:
        raise UserError(f"backend registered as {name!r} calls itself {cls.name!r}; the two must agree")
    return cls


def backend_classes() -> list[type[Backend[Any]]]:
    return [backend_class(name) for name in names()]


class _RegisteredSections:
    """The registered backends' option models, as the spec asks for them (:class:`cloudddp.spec.model.Sections`)."""

    def names(self) -> list[str]:
        return names()

    def options_model(self, name: str) -> type[BaseModel]:
        return backend_class(name).options_model


SECTIONS = _RegisteredSections()


def spec_model(wanted: Iterable[str] | None = None) -> type[JobSpec]:
    """The job spec model with the sections of the registered backends in ``wanted`` (None: all of them)."""
    return model.spec_model(SECTIONS, wanted)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a job file with every registered backend's section."""
    return model.json_schema(SECTIONS)


def user_config() -> UserConfig | None:
    """This user's configuration file, checked against the registered backends (None: there is none)."""
    return userconfig.read_config(SECTIONS)


def configured_backends() -> list[str]:
    """The backends ``-b auto`` may place a job that names none on: the user configuration's ``backends:``, else
    the backends it has settings for ([] without a configuration)."""
    config = user_config()
    return config.backends if config else []


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> JobSpec:
    """Read, check and return the job spec at ``path``, with the user configuration's settings it leaves out (see
    :func:`cloudddp.spec.load.load_spec`)."""
    return load.load_spec(path, overrides, sections=SECTIONS, config=user_config())


def spec_from_dict(
    data: Mapping[str, Any], *, base_dir: str | Path = ".", overrides: Sequence[str] = (), source: str = "<dict>"
) -> JobSpec:
    """A job spec from a mapping, with the same checks and messages as a file, and the user configuration's
    settings it leaves out."""
    return load.spec_from_dict(
        data, sections=SECTIONS, base_dir=base_dir, overrides=overrides, source=source, config=user_config()
    )


def spec_from_bytes(
    raw: bytes, *, source: str = "<text>", base_dir: str | Path = ".", overrides: Sequence[str] = ()
) -> JobSpec:
    """A job spec from YAML bytes, as if read from a file named ``source`` (with the user configuration's settings)."""
    return load.spec_from_bytes(
        raw, sections=SECTIONS, source=source, base_dir=base_dir, overrides=overrides, config=user_config()
    )
