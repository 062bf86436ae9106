"""The ``cloudddp`` command line (click; rich only where a command draws a table).

Exit codes: 0 ok, 1 the run failed, 2 bad input (spec, arguments, missing credentials), with a message
and no traceback. Each command lives in the module of its group (:data:`COMMANDS`), imported only when the
command is run or ``--help`` lists the commands: ``cloudddp render`` loads the spec and the one backend it
renders for, never the runner. ``cloudddp --help`` imports neither torch nor any cloud SDK: backends import
their SDK only where they talk to the cloud.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from cloudddp.cli.options import fail, print_json
from cloudddp.errors import CloudDDPError

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
    "list": "cloudddp.cli.cmd_runs:list_",
    "backends": "cloudddp.cli.cmd_backends:backends",
}
"""Each command's name and where it is defined (``module:attribute``)."""


class LazyGroup(click.Group):
    """A group whose commands are imported on first use from ``lazy_subcommands`` (click's documented pattern)."""

    def __init__(self, *args: Any, lazy_subcommands: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_subcommands = lazy_subcommands or {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy_subcommands])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_subcommands:
            return self._lazy_load(cmd_name)
        return super().get_command(ctx, cmd_name)

    def _lazy_load(self, cmd_name: str) -> click.Command:
        module_name, _, attribute = self.lazy_subcommands[cmd_name].partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.lazy_subcommands[cmd_name]} is not a click command")
        return command


@click.group(cls=LazyGroup, lazy_subcommands=COMMANDS, context_settings=CONTEXT)
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


def main() -> None:
    try:
        app.main(prog_name="cloudddp", standalone_mode=True)
    except CloudDDPError as e:
        if "--json" in sys.argv[1:]:  # scripts read stdout: one document there, on failure too
            problems = getattr(e, "problems", None) or [str(e).split("\nhint: ")[0]]
            hint = getattr(e, "hint", None)
            print_json({"ok": False, "problems": problems, **({"hint": hint} if hint else {})})
        fail(e)
