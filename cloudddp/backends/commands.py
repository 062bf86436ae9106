"""What a command line command shares with every other, a backend's own included: the ``--override`` and
``--json`` options, spelled once.

A backend contributes a command through the ``cloudddp.commands`` entry-point group (docs/writing-a-backend.md);
it may import click and this module, never :mod:`cloudddp.cli` (a layer above it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

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
