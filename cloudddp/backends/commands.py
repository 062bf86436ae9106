"""What a command line command shares with every other, a backend's own included: the ``--override`` and
``--json`` options, spelled once, and reading the job spec they name.

A backend contributes a command through the ``cloudddp.commands`` entry-point group (docs/writing-a-backend.md);
it may import click and this module, never :mod:`cloudddp.cli` (a layer above it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from cloudddp.backends.plugins import load_spec
from cloudddp.spec.model import JobSpec

F = TypeVar("F", bound=Callable[..., Any])


def override_option(f: F) -> F:
    return click.option(
        "--override",
        "-o",
        "override",
        multiple=True,
        metavar="KEY=VALUE",
        help="Override a spec field: -o resources.nodes=2 (repeatable).",
    )(f)


def json_option(f: F) -> F:
    return click.option("--json", "json_", is_flag=True, help="Print machine-readable JSON.")(f)


def load_job(path: Path, overrides: Sequence[str] | None) -> JobSpec:
    """The job spec at ``path`` with ``-o`` overrides, checked against the registered backends' sections."""
    return load_spec(path, overrides or [])
