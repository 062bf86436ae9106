"""A backend shipped in another distribution registers through the ``cloudddp.backends`` entry-point group
and is a first-class backend: listed, its spec section validated and completed, rendered and submitted,
with nothing in cloudddp edited. The plugin lives in ``tests/fixtures/plugin`` as an installed
distribution would (a package plus its ``.dist-info`` with ``entry_points.txt``) on the Python path."""

from __future__ import annotations

import json
import os

from .support.cli import FIXTURES, ROOT, cli

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
