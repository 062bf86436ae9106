"""The ``cloudddp`` command line (click; rich only where a command draws a table).

Exit codes: 0 ok, 1 the run failed, 2 bad input (spec, arguments, missing credentials), with a message
and no traceback. Each command lives in the module of its group (:data:`COMMANDS`), imported only when the
command is run (``--help`` lists them from :data:`SUMMARIES`): ``cloudddp render`` loads the spec and the one
backend it renders for, never the runner. A backend adds commands of its own through the ``cloudddp.commands``
entry-point group (``cloudddp storage`` is Slurm's), imported only when one is run: ``--help`` lists them by name
and owner. So ``cloudddp --help`` imports no command's module and no backend, nor torch or any cloud SDK: backends
import their SDK only where they talk to the cloud.
"""

from __future__ import annotations

import difflib
import functools
import gc
import importlib
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from cloudddp.backends import installed
from cloudddp.errors import CloudDDPError, UserError
from cloudddp.observe.console import print_json
from cloudddp.paths import UnsafeFolder

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 110}

COMMANDS = {
    "validate": "cloudddp.cli.cmd_spec:validate",
    "render": "cloudddp.cli.cmd_spec:render",
    "schema": "cloudddp.cli.cmd_spec:schema",
    "init": "cloudddp.cli.cmd_spec:init",
    "submit": "cloudddp.cli.cmd_submit:submit",
    "doctor": "cloudddp.cli.cmd_submit:doctor",
    "skus": "cloudddp.cli.cmd_sizes:skus",
    "plan": "cloudddp.cli.cmd_sizes:plan",
    "status": "cloudddp.cli.cmd_runs:status",
    "cost": "cloudddp.cli.cmd_runs:cost",
    "recover": "cloudddp.cli.cmd_runs:recover",
    "logs": "cloudddp.cli.cmd_runs:logs",
    "metrics": "cloudddp.cli.cmd_runs:metrics",
    "cancel": "cloudddp.cli.cmd_runs:cancel",
    "stacks": "cloudddp.cli.cmd_stacks:stacks",
    "list": "cloudddp.cli.cmd_runs:list_",
    "backends": "cloudddp.cli.cmd_backends:backends",
    "check": "cloudddp.cli.cmd_check:check",
    "config": "cloudddp.cli.cmd_config:config",
}
"""Each of cloudddp's own commands and where it is defined (``module:attribute``); a name here is never a
backend's."""

SUMMARIES = {
    "validate": "Check a job spec and report every problem with its line: the fields, and that the code it runs is "
    "there.",
    "render": "Print exactly what a backend would send (no network, no credentials).",
    "schema": "The JSON Schema of job specs, for editors (yaml-language-server: $schema=...).",
    "init": "Write a project that runs as it is: a commented job spec, its JSON Schema for editors, and a small DDP "
    "script of your own to edit (or, with --with-script, the shared training script).",
    "submit": "Render the job and launch it; follow its metrics until it ends unless --detach.",
    "doctor": "Check before launching: the plan's own checks, then credentials, quota, sizes and data at the target.",
    "skus": "GPU sizes for a job, ranked by the estimated cost of the whole job, each with its reasons.",
    "plan": "The size a backend would use for the job, why, its cost estimate and the NCCL/EFA presets applied.",
    "status": "Show a run's state; for a failed run, which rank failed, why, and the tail of its log.",
    "cost": "What a run cost (so far, while it goes) next to what was estimated at submit, each figure with its "
    "source.",
    "recover": "Pick up recovery where it stopped: start the watcher again for RUN (or for every run still under "
    "recovery whose watcher is gone, e.g. after this machine restarted).",
    "logs": "Print a run's logs, each line prefixed by the rank or host it came from.",
    "metrics": "Print a run's metrics (from the training script's metric lines); a live table with -f on a terminal.",
    "stacks": "Every rank's Python stacks now, each rank once: ranks with the same stack shown once, the odd ones "
    "out first.",
    "cancel": "Stop a run: the training script checkpoints, then every process of the run ends.",
    "list": "Runs submitted from this machine, newest first, a page at a time.",
    "backends": "The registered backends, what each can do, and what it cannot (with the reason).",
    "check": "Is every backend ready? Its settings, credentials and reachability, each with the fix.",
    "config": "The user configuration: each backend's settings kept once, outside every job (a job's own values win).",
}
"""Each of :data:`COMMANDS`' first sentence, the start of its own help: ``cloudddp --help`` lists the commands from
these, so that listing them imports none of their modules (a test holds each to its command's help)."""

MEANT = {"sizes": "skus", "instances": "skus", "gpus": "skus", "runs": "list", "ls": "list", "run": "submit"}
"""Names people type for a command that has another name here (what other tools call it)."""


class LazyGroup(click.Group):
    """A group whose commands are imported on first use from ``lazy_subcommands`` (click's documented pattern),
    and from ``contributed``: what an entry-point group adds (name -> ``module:attribute``, read when asked), but
    for a name ``lazy_subcommands`` has."""

    def __init__(
        self,
        *args: Any,
        lazy_subcommands: dict[str, str] | None = None,
        summaries: dict[str, str] | None = None,
        contributed: Callable[[], dict[str, str]] = dict,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_subcommands = lazy_subcommands or {}
        self.summaries = summaries or {}
        self.contributed = contributed

    def _contributed(self) -> dict[str, str]:
        return {name: entry for name, entry in self.contributed().items() if name not in self.lazy_subcommands}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_subcommands, *self._contributed()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_subcommands:
            return self._lazy_load(cmd_name)
        entry = self._contributed().get(cmd_name)
        if entry is not None:
            return _contributed_command(cmd_name, entry)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Click's list of the commands, importing none of them: a command with a summary is listed from it (a
        stand-in command of that help), a contributed one (its module is in a backend's package, which would load
        the whole backend) by where it comes from."""
        contributed = self._contributed()
        rows: list[tuple[str, click.Command | str]] = []
        for name in self.list_commands(ctx):
            if name in contributed:
                rows.append((name, f"From {_owner(contributed[name])}: cloudddp {name} --help"))
                continue
            summary = self.summaries.get(name)
            command = click.Command(name, help=summary) if summary else self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command))
        if rows:
            limit = formatter.width - 6 - max(len(name) for name, _ in rows)
            with formatter.section("Commands"):
                formatter.write_dl([(n, c if isinstance(c, str) else c.get_short_help_str(limit)) for n, c in rows])

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """An unknown command names the one meant: another tool's name for it, or the closest spelling."""
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            guess = MEANT.get(name) or next(iter(difflib.get_close_matches(name, self.list_commands(ctx), n=1)), None)
            if guess:
                ctx.fail(f"No such command '{name}'; did you mean '{guess}'? (cloudddp {guess} --help)")
        return super().resolve_command(ctx, args)

    def _lazy_load(self, cmd_name: str) -> click.Command:
        module_name, _, attribute = self.lazy_subcommands[cmd_name].partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.lazy_subcommands[cmd_name]} is not a click command")
        return command


def _contributed_command(name: str, entry: str) -> click.Command:
    """The click command ``entry`` (``module:attribute``) names, registered as ``name``; a UserError when it cannot
    be loaded (the distribution that registered it is broken, not cloudddp)."""
    command = installed.load("command", name, entry)
    if not isinstance(command, click.Command):
        raise UserError(f"command {name!r} ({entry}) is not a click command")
    return command


def _owner(entry: str) -> str:
    """Who contributes the command ``entry`` names, without importing it: the registered backend whose package
    holds its module, else its top package."""
    module = entry.partition(":")[0]
    for name, backend in installed.entry_points(installed.BACKENDS).items():
        if module.startswith(backend.partition(":")[0] + "."):
            return f"the {name} backend"
    return module.split(".")[0]


@click.group(
    cls=LazyGroup,
    lazy_subcommands=COMMANDS,
    summaries=SUMMARIES,
    contributed=functools.partial(installed.entry_points, installed.COMMANDS),
    context_settings=CONTEXT,
)
@click.version_option(package_name="cloudddp", message="cloudddp %(version)s")
def app() -> None:
    """Run PyTorch DDP training anywhere from one job spec: locally with torchrun or on any registered backend
    (`cloudddp backends` lists them).

    \b
    Start here:
      cloudddp init my-project              # a job spec and a small DDP script that run as they are
      cloudddp submit my-project/job.yaml   # train here; add -b sagemaker|azureml|slurm for elsewhere
      cloudddp list                         # your runs; then status, logs, metrics, cancel (the latest run)
    """
    _COLLECTOR.resume()  # start-up is over: the command runs


class _StartUpCollector:
    """Python's cyclic garbage collector, paused for the process's start-up by :func:`main`.

    Start-up (click, pydantic, the spec and backend models, the command's module) makes ~50,000 objects that all
    live until the process ends. The collector would walk them again and again while they are made, and once more
    at exit, for nothing: ~25 ms of a ~170 ms ``render``. :meth:`resume` freezes what start-up built out of its way
    (``gc.freeze``) and lets it run again: a long command, such as a followed submit, makes garbage that needs it.
    """

    def __init__(self) -> None:
        self.paused = False

    def pause(self) -> None:
        self.paused = gc.isenabled()
        gc.disable()

    def resume(self) -> None:
        """A no-op unless :meth:`pause` paused it: ``app`` called in-process (tests, notebooks) is left alone."""
        if self.paused:
            self.paused = False
            gc.freeze()
            gc.enable()


_COLLECTOR = _StartUpCollector()


def main() -> None:
    """The process entry: the ``cloudddp`` console script and ``python -m cloudddp``.

    The garbage collector is paused until the command starts (:class:`_StartUpCollector`); at exit what is left is
    frozen, so that the interpreter's last collection skips it (the OS frees it). Files are closed by the code
    that opens them, never left to that collection. Pydantic is told from the cached entry-point scan whether
    any plugin of its own is installed (:func:`cloudddp.backends.installed.spare_pydantic_plugin_scan`).
    """
    _COLLECTOR.pause()
    try:
        installed.spare_pydantic_plugin_scan()  # reads the cache in $CLOUDDDP_HOME: a home refused is exit 2 too
        app.main(prog_name="cloudddp", standalone_mode=True)
    except (CloudDDPError, UnsafeFolder) as e:
        if "--json" in sys.argv[1:]:  # scripts read stdout: one document there, on failure too
            problems = getattr(e, "problems", None) or [str(e).split("\nhint: ")[0]]
            hint = getattr(e, "hint", None)
            print_json({"ok": False, "problems": problems, **({"hint": hint} if hint else {})})
        fail(e)
    finally:
        _COLLECTOR.resume()
        gc.freeze()


def fail(e: CloudDDPError | UnsafeFolder) -> NoReturn:
    """The error's message on stderr, no traceback, and its exit code."""
    click.secho("error: ", fg="red", bold=True, nl=False, err=True)
    click.echo(str(e), err=True)
    sys.exit(e.exit_code)
