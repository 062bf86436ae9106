"""`cloudddp --help`, validate and render must stay light: no torch, no cloud SDK."""

from __future__ import annotations

import subprocess
import sys

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
print("EXIT=" + str(code), file=sys.stderr)
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
"""


def imported_heavy(*args: str) -> list[str]:
    code = PROBE.format(args=list(args), heavy=HEAVY)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    line = [ln for ln in result.stderr.splitlines() if ln.startswith("HEAVY=")]
    assert line, result.stderr
    assert "EXIT=0" in result.stderr.splitlines(), result.stderr  # the command itself worked
    return [m for m in line[-1].removeprefix("HEAVY=").split(",") if m]


def test_help_imports_no_torch_or_cloud_sdk() -> None:
    assert imported_heavy("--help") == []


def test_validate_and_local_render_import_no_torch_or_cloud_sdk() -> None:
    job = str(ROOT / "tests/fixtures/tinyjob/job.yaml")
    assert imported_heavy("validate", job) == []
    assert imported_heavy("render", job, "--backend", "local") == []


def test_the_user_configuration_s_commands_import_no_torch_or_cloud_sdk() -> None:
    """Reading the user configuration (a YAML file) needs no cloud SDK, nor does check's help."""
    assert imported_heavy("config", "show") == []
    assert imported_heavy("config", "path") == []
    assert imported_heavy("check", "--help") == []
