"""Terminal output: rich consoles created on first use (rich costs ~100 ms to import, so commands that
only print text, like ``render``, never load it), and progress for long work."""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Callable
from typing import Any

import click

PIPE_WIDTH = 160  # tables written to a pipe or file are not squeezed to 80 columns


@functools.cache
def out() -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else PIPE_WIDTH)


@functools.cache
def err() -> Any:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True, width=None if sys.stderr.isatty() else PIPE_WIDTH)


def print_json(data: Any) -> None:
    """One JSON document on stdout (what ``--json`` prints)."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


_CONTROL = re.compile(
    r"\x1b\[[0-9;:]*m"  # SGR (colour, bold): kept
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"  # every other control character (ESC starting OSC 52, a title, ESC[2J)
)


def printable(text: str) -> str:
    """``text`` safe to write to a terminal: colour and style (SGR) pass, every other control sequence is shown,
    not obeyed (its ESC as ``\\x1b``: no clipboard write, no title, no screen cleared, no cursor moved). Output
    is masked before it gets here, so a secret split by a colour reset is already hidden."""
    return _CONTROL.sub(lambda m: m[0] if len(m[0]) > 1 else f"\\x{ord(m[0]):02x}", text)


_NAME_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\udc80-\udcff\\]")


def safe_name(name: str) -> str:
    """A file name (one a checkpoint folder, S3 or a datastore holds: anyone who could write there chose it) safe
    to print: every control character, a tab or newline too, shown as ``\\xNN`` (none obeyed, none starts a line or
    colours what follows), a byte that was not UTF-8 (read with ``surrogateescape``) as ``\\xNN`` of that byte, and a
    backslash doubled, so no two names print alike."""

    def shown(m: re.Match[str]) -> str:
        c = ord(m[0])
        return "\\\\" if m[0] == "\\" else f"\\x{c - 0xDC00 if c >= 0xDC80 else c:02x}"

    return _NAME_CONTROL.sub(shown, name)


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def line_tag(line: Any) -> str:
    """Where a log line (a ``LogLine``) came from, as shown before it: ``rank3``, ``node1/rank3``; a line from outside
    the program (launcher, toolkit, runtime: no rank) says so: ``algo-1 runtime``."""
    return str(line.source) if line.rank is not None else f"{line.source} runtime".strip()


def ok(text: str) -> None:
    """A line on stdout saying that something checked out: ``ok`` in green, then ``text``, without rich."""
    click.secho("ok", fg="green", nl=False)
    click.echo(f" {text}")


def note(text: str, *, warning: bool = False) -> None:
    """A decision or warning on stderr, without rich."""
    if warning:
        click.secho("warning: ", fg="yellow", nl=False, err=True)
        click.echo(text, err=True)
    else:
        click.echo(click.style("• ", dim=True) + text, err=True)


class Progress:
    """Progress for long work (uploads, provisioning) on stderr; steps always, bars only on a terminal.

    ``on_plan`` is called with the rendered plan before anything is sent (the CLI prints its decisions)."""

    def __init__(self, on_plan: Callable[[Any], None] | None = None) -> None:
        self.live = sys.stderr.isatty()
        self.on_plan = on_plan

    def planned(self, plan: Any) -> None:
        if self.on_plan is not None:
            self.on_plan(plan)

    def step(self, description: str) -> None:
        click.echo(click.style("… ", dim=True) + description, err=True)

    def advance(self, description: str, done: int, total: int | None) -> None:
        if not self.live:
            return
        pct = f" {100 * done / total:5.1f}%" if total else f" {done:,} bytes"
        click.echo(f"\r{description}{pct}", nl=bool(total and done >= total), err=True)
