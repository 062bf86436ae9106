"""A backend shipped in another distribution registers through the ``cloudddp.backends`` entry-point group
and is a first-class backend: listed, its spec section validated and completed, rendered and submitted, and a
command of its own on the command line (``cloudddp.commands``), with nothing in cloudddp edited. The plugin lives
in ``tests/fixtures/plugin`` as an installed distribution would (a package plus its ``.dist-info`` with
``entry_points.txt``) on the Python path."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import metadata

from tests.support.cli import FIXTURES, ROOT, cli

PLUGIN = FIXTURES / "plugin"
WITH_PLUGIN = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(PLUGIN)])}
TOY_JOB = PLUGIN / "job.yaml"


def test_the_plugin_is_listed_with_the_built_ins() -> None:
    result = cli("backends", "--json", env=WITH_PLUGIN)
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert {"local", "sagemaker", "azureml", "toy"} <= set(rows)
    assert rows["toy"]["description"].startswith("writes the job into a folder")
    assert "toy" in cli("submit", "--help", env=WITH_PLUGIN).stdout
    assert "toy" not in cli("submit", "--help").stdout  # not installed: not there


def test_its_section_is_validated_like_a_built_in_one(tmp_path) -> None:
    assert cli("validate", str(TOY_JOB), env=WITH_PLUGIN).returncode == 0
    typo = cli("validate", str(TOY_JOB), "-o", "toy.greting=hey", env=WITH_PLUGIN)
    assert typo.returncode == 2
    assert "toy.greting: unknown key; did you mean 'greeting'?" in typo.stderr
    bad = cli("validate", str(TOY_JOB), "-o", "toy.flavour=salty", env=WITH_PLUGIN)
    assert bad.returncode == 2 and "toy.flavour" in bad.stderr and "Traceback" not in bad.stderr
    assert "override -o toy.greting=hey" in typo.stderr  # where the mistake is
    in_file = tmp_path / "job.yaml"
    in_file.write_text(
        TOY_JOB.read_text().replace("greeting:", "greting:").replace("../tinyjob", str(PLUGIN.parent / "tinyjob"))
    )
    line = next(i for i, text in enumerate(in_file.read_text().splitlines(), 1) if "greting" in text)
    found = cli("validate", str(in_file), env=WITH_PLUGIN)
    assert f"job.yaml:{line}: toy.greting: unknown key; did you mean 'greeting'?" in found.stderr
    without = cli("validate", str(TOY_JOB))
    assert without.returncode == 2 and "toy: unknown key" in without.stderr


def test_its_section_is_in_the_json_schema() -> None:
    schema = json.loads(cli("schema", env=WITH_PLUGIN).stdout)
    assert "toy" in schema["properties"]
    assert "greeting" in json.dumps(schema)


def test_it_renders_and_submits_through_the_same_verbs() -> None:
    rendered = cli("render", str(TOY_JOB), "-b", "toy", "--json", env=WITH_PLUGIN)
    assert rendered.returncode == 0, rendered.stderr
    request = json.loads(rendered.stdout)["request"]
    assert request == {"job": "toy-job", "greeting": "hi there", "flavour": "fancy", "args": ["--epochs", "2"]}
    submitted = cli("submit", str(TOY_JOB), "-b", "toy", "--detach", "--quiet", env=WITH_PLUGIN)
    assert submitted.returncode == 0, submitted.stderr
    assert submitted.stdout.strip() == "toy-job"
    logs = cli("logs", "toy-job", env=WITH_PLUGIN)
    assert logs.returncode == 0 and "[toy] hi there" in logs.stdout
    assert "no toy run 'other'" in cli("status", "other", "-b", "toy", env=WITH_PLUGIN).stderr


def test_input_locations_per_backend_accept_the_earlier_form_and_name_unknown_backends(tmp_path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: inputs\ncode: {dir: " + str(FIXTURES / "tinyjob") + "}\n"
        "inputs:\n  data:\n    path: ./data\n    sagemaker: s3://bucket/data/\n"
    )
    old = cli(
        "render",
        str(spec),
        "-b",
        "sagemaker",
        "--json",
        "-o",
        "sagemaker.region=us-east-1",
        "-o",
        "sagemaker.role=arn:aws:iam::123456789012:role/r",
        "-o",
        "sagemaker.instance_type=ml.m5.xlarge",
        "-o",
        "sagemaker.image=img:1",
    )
    assert old.returncode == 0, old.stderr
    channel = json.loads(old.stdout)["request"]["InputDataConfig"][0]
    assert channel["DataSource"]["S3DataSource"]["S3Uri"] == "s3://bucket/data/"
    typo = cli("validate", str(spec), "-o", "inputs.data.at.sagemakr=s3://b/d/")
    assert typo.returncode == 2 and "did you mean 'sagemaker'?" in typo.stderr


def test_its_missing_setting_is_named_with_an_example_and_the_variable_that_gives_it() -> None:
    missing = cli("render", str(TOY_JOB), "-b", "toy", "-o", "toy.greeting=null", env=WITH_PLUGIN)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "toy.greeting: what the toy says when it runs (e.g. hello there, or TOY_GREETING" in missing.stderr
    from_env = cli(
        "render", str(TOY_JOB), "-b", "toy", "-o", "toy.greeting=null", env={**WITH_PLUGIN, "TOY_GREETING": "hey"}
    )
    assert from_env.returncode == 0, from_env.stderr
    assert '"greeting": "hey"' in from_env.stdout


def test_its_preflight_translated_errors_metrics_and_bill_reach_the_user_through_the_commands() -> None:
    doctor = cli("doctor", str(TOY_JOB), "-b", "toy", "--json", env=WITH_PLUGIN)
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["run name free"]["ok"] is True, doctor.stdout
    assert cli("submit", str(TOY_JOB), "-b", "toy", "--detach", "--quiet", env=WITH_PLUGIN).returncode == 0
    again = cli("doctor", str(TOY_JOB), "-b", "toy", "--json", env=WITH_PLUGIN)
    assert {c["name"]: c["ok"] for c in json.loads(again.stdout)["checks"]}["run name free"] is False
    refused = cli("submit", str(TOY_JOB), "-b", "toy", "--detach", "--skip-checks", env=WITH_PLUGIN)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr  # _translate: the toy's error, mapped
    assert "the toy refused the run: ToyConflict: a run named toy-job exists" in refused.stderr
    assert "rename the job" in refused.stderr
    metrics = cli("metrics", "toy-job", "--json", env=WITH_PLUGIN)
    assert metrics.returncode == 0, metrics.stderr
    assert [r["words"] for r in map(json.loads, metrics.stdout.splitlines())] == [2.0]  # "hi there"
    cost = cli("cost", "toy-job", "--json", env=WITH_PLUGIN)
    assert cost.returncode == 0, cost.stderr
    bill = json.loads(cost.stdout)["actual"]
    assert bill["cost"] == 0.02 and bill["figures"][0]["name"] == "words said"


def test_its_next_attempt_and_a_saved_plan_keep_its_typed_request() -> None:
    code = (
        "import json; from cloudddp.runs.runner import get_backend; from cloudddp.backends.plugins import load_spec;"
        f"backend = get_backend('toy'); plan = backend.render(load_spec({str(TOY_JOB)!r}));"
        "second = backend.for_attempt(plan, 2); third = backend.for_attempt(second, 3);"
        "restored = backend.restore(third.to_state());"
        "print(json.dumps([second.job_name, third.job_name, third.request.job, type(restored.request).__name__,"
        " restored.request == third.request]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **WITH_PLUGIN}
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["toy-job-r2", "toy-job-r3", "toy-job-r3", "ToyRequest", True]


HELP_PROBE = """
import sys
sys.argv = ["cloudddp", "--help"]
from cloudddp.backends import installed
from cloudddp.cli.app import main
try:
    main()
except SystemExit:
    pass
packages = {entry.partition(":")[0] for entry in installed.entry_points(installed.BACKENDS).values()}
print("IMPORTED=" + ",".join(sorted(packages & set(sys.modules))), file=sys.stderr)
"""


def test_its_command_is_listed_without_importing_it_and_runs_when_asked() -> None:
    """``cloudddp --help`` names the toy's command and whose it is, importing no backend; the command runs with
    cloudddp's own options; a name cloudddp's own commands have stays cloudddp's."""
    listed = subprocess.run(
        [sys.executable, "-c", HELP_PROBE], capture_output=True, text=True, env={**os.environ, **WITH_PLUGIN}
    )
    assert listed.returncode == 0, listed.stderr
    assert "toy-runs  From the toy backend: cloudddp toy-runs --help" in listed.stdout, listed.stdout
    assert "IMPORTED=\n" in listed.stderr, listed.stderr  # neither the toy's package nor any built-in backend's
    assert "toy-runs" not in cli("--help").stdout  # not installed: not there
    assert "cloudddp toy-runs" in cli("toy-runs", "--help", env=WITH_PLUGIN).stdout
    assert cli("submit", str(TOY_JOB), "-b", "toy", "--detach", "--quiet", env=WITH_PLUGIN).returncode == 0
    assert json.loads(cli("toy-runs", "--json", env=WITH_PLUGIN).stdout) == ["toy-job"]
    other = cli("toy-runs", str(TOY_JOB), "-o", "name=other", "--json", env=WITH_PLUGIN)
    assert other.returncode == 0 and json.loads(other.stdout) == [], other.stderr
    # The toy's entry point named render is not taken: the name is cloudddp's own command's.
    rendered = cli("render", str(TOY_JOB), "-b", "toy", "--json", env=WITH_PLUGIN)
    assert rendered.returncode == 0 and json.loads(rendered.stdout)["backend"] == "toy", rendered.stderr


def test_the_installed_entry_points_are_the_checkouts() -> None:
    """What pyproject.toml registers is what the installed cloudddp's metadata says: a backend or command added
    to the checkout is there only after ``pip install --no-deps -e .``."""
    declared: dict[str, dict[str, str]] = {}
    group = None
    for line in (ROOT / "pyproject.toml").read_text().splitlines():  # no TOML reader before Python 3.11
        if line.startswith("["):
            header = re.fullmatch(r'\[project\.entry-points\."([^"]+)"\]', line)
            group = header.group(1) if header else None
            declared.update({group: {}} if group else {})
        elif group and (entry := re.fullmatch(r'(\S+) = "([^"]+)"', line)):
            declared[group][entry.group(1)] = entry.group(2)
    assert {"cloudddp.backends", "cloudddp.commands"} <= set(declared), declared
    installed = metadata.distribution("cloudddp").entry_points
    for name, entries in declared.items():
        found = {ep.name: ep.value for ep in installed if ep.group == name}
        assert found == entries, f"{name}: installed {found}, pyproject.toml {entries}: pip install --no-deps -e ."
