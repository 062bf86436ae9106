"""What the command modules share: the options and arguments they declare alike, and printing a plan, JSON, a
metric record or money. ``--override``, ``--json`` and reading the job spec they name are
:mod:`cloudddp.backends.commands`', which a backend's own command uses too."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from cloudddp.backends.plugins import names
from cloudddp.observe.console import note, print_json, printable
from cloudddp.observe.metrics import MetricRecord
from cloudddp.paths import home
from cloudddp.plan import Plan

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

F = TypeVar("F", bound=Callable[..., Any])


# -- options and arguments -------------------------------------------------------------------------


def job_argument(f: F) -> F:
    return click.argument("job", type=click.Path(path_type=Path, dir_okay=False))(f)


def registered(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of ``--backend``: the registered backends' names."""
    from click.shell_completion import CompletionItem  # only when the shell completes a word

    return [CompletionItem(name) for name in names() if name.startswith(incomplete)]


class BackendOption(click.Option):
    """``--backend``: its help lists the registered backends, read only when help is shown."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        self.help = f"{self.help} One of: {', '.join(names())}."
        return super().get_help_record(ctx)


def backend_option(default: str | None = "local", help: str = "The backend to use.") -> Callable[[F], F]:
    return click.option(
        "--backend",
        "-b",
        cls=BackendOption,
        default=default,
        show_default=default is not None,
        envvar="CLOUDDDP_BACKEND" if default else None,
        help=help,
        shell_complete=registered,
    )


def sdk_log() -> Path:
    """Where the clouds' SDKs write during a command, unless ``--verbose`` (docs/metrics-and-logs.md). The
    diversion itself (:mod:`cloudddp.observe.sdklog`, which loads :mod:`logging`) is imported by the commands that
    reach a cloud, not here: ``render`` stays light."""
    return home() / "logs" / "sdk.log"


def follow_option(f: F) -> F:
    return click.option("--follow", "-f", is_flag=True, help="Keep printing until the run ends.")(f)


# -- output ----------------------------------------------------------------------------------------


def plan_notes(plan: Plan) -> None:
    """The plan's decisions and warnings, on stderr."""
    for d in plan.decisions:
        note(d)
    for w in plan.warnings:
        note(w, warning=True)


def print_plan(plan: Plan, *, json_: bool) -> None:
    """What a backend would send: its documents on stdout (or the plan as JSON), then the plan's notes."""
    if json_:
        print_json(plan.to_dict())
        return
    sys.stdout.write(plan.text())
    plan_notes(plan)


def format_record(record: MetricRecord) -> str:
    parts = [] if record.rank is None else [f"rank {record.rank}"]
    if record.epoch is not None:
        parts.append(f"epoch {record.epoch}")
    if record.step is not None:
        parts.append(f"step {record.step}")
    for k, v in record.values.items():
        parts.append(f"{k}={number(v)}")
    return printable("  ".join(parts))


def number(value: float) -> str:
    """Four significant digits; a float that is exactly zero stays a float (``0.0``, not ``0``)."""
    text = f"{value:.4g}"
    return text + ".0" if isinstance(value, float) and text.lstrip("-").isdigit() and "e" not in text else text


def money(v: float | None) -> str:
    if v is None:
        return "?"
    return f"${v:,.2f}" if abs(v) >= 1 or v == 0 else f"${v:.2g}"
