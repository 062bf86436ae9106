"""`cloudddp --help`, validate and render must stay light: no torch, no cloud SDK; and `--help` no backend (a
command a backend adds is listed by name) and no command's module (each is listed from its summary)."""

from __future__ import annotations

import subprocess
import sys

import click

from cloudddp.cli.app import COMMANDS, SUMMARIES, app
from tests.support.cli import ROOT

HEAVY = ("torch", "numpy", "azure", "boto3", "botocore", "sagemaker", "moto")

PROBE = """
import sys
sys.argv = ["cloudddp", *{args!r}]
from cloudddp.cli.app import main
code = 0
try:
    main()
except SystemExit as e:
    code = e.code or 0
heavy = sorted({{m.split(".")[0] for m in sys.modules}} & set({heavy!r}))
from cloudddp.backends import installed
backends = {{entry.partition(":")[0] for entry in installed.entry_points(installed.BACKENDS).values()}}
print("EXIT=" + str(code), file=sys.stderr)
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
print("BACKENDS=" + ",".join(sorted(backends & set(sys.modules))), file=sys.stderr)
print("COMMANDS=" + ",".join(sorted(m for m in sys.modules if m.startswith("cloudddp.cli.cmd_"))), file=sys.stderr)
print("RICH=" + ",".join(sorted(m for m in sys.modules if m.split(".")[0] == "rich")), file=sys.stderr)
"""


def imported(*args: str, what: str = "HEAVY") -> list[str]:
    """What the command imports of :data:`HEAVY` (``what="BACKENDS"``: of the registered backends' packages;
    ``what="COMMANDS"``: of the modules that define cloudddp's own commands; ``what="RICH"``: of rich)."""
    code = PROBE.format(args=list(args), heavy=HEAVY)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    line = [ln for ln in result.stderr.splitlines() if ln.startswith(f"{what}=")]
    assert line, result.stderr
    assert "EXIT=0" in result.stderr.splitlines(), result.stderr  # the command itself worked
    return [m for m in line[-1].removeprefix(f"{what}=").split(",") if m]


def imported_heavy(*args: str) -> list[str]:
    return imported(*args)


def test_help_imports_no_torch_or_cloud_sdk_no_backend_and_no_command() -> None:
    assert imported_heavy("--help") == []
    assert imported("--help", what="BACKENDS") == []  # Slurm's storage command is listed, not imported
    assert imported("--help", what="COMMANDS") == []  # each is listed from its summary


def test_each_command_is_listed_from_its_summary_as_click_lists_the_command_itself() -> None:
    """A summary is the start of its command's first paragraph, and shortens to what the command's help would."""
    assert set(SUMMARIES) == set(COMMANDS)
    ctx = click.Context(app)
    for name, summary in SUMMARIES.items():
        command = app.get_command(ctx, name)
        assert command is not None and command.help
        first_paragraph = command.help.split("\n\n")[0].split()
        assert first_paragraph[: len(summary.split())] == summary.split(), name
        stand_in = click.Command(name, help=summary)
        for limit in range(10, 240):
            assert stand_in.get_short_help_str(limit) == command.get_short_help_str(limit), (name, limit)


def test_validate_and_local_render_import_no_torch_or_cloud_sdk() -> None:
    job = str(ROOT / "tests/fixtures/tinyjob/job.yaml")
    assert imported_heavy("validate", job) == []
    assert imported_heavy("render", job, "--backend", "local") == []


def test_validate_and_render_print_without_rich() -> None:
    """rich is for tables: the lines validate and render print are click's."""
    job = str(ROOT / "jobs" / "cifar10-azureml.yaml")
    assert imported("validate", job, what="RICH") == []
    assert imported("validate", job, "-b", "azureml", what="RICH") == []
    assert imported("render", job, "-b", "azureml", what="RICH") == []


def test_the_user_configuration_s_commands_import_no_torch_or_cloud_sdk() -> None:
    """Reading the user configuration (a YAML file) needs no cloud SDK, nor does check's help."""
    assert imported_heavy("config", "show") == []
    assert imported_heavy("config", "path") == []
    assert imported_heavy("check", "--help") == []
