"""The job spec: strict validation, errors that name the field and the line, overrides, schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cloudddp.backends.plugins import load_spec, spec_from_dict
from cloudddp.errors import SpecError, UserError
from cloudddp.plan import Plan
from cloudddp.spec.model import JobSpec, parse_duration
from cloudddp.spec.secrets import rendered_env
from tests.support.cli import ROOT, cli


def write(tmp_path: Path, text: str | bytes, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


GOOD = """\
name: demo
code:
  dir: .
  entry: train.py
  args: [--epochs, 3]
resources:
  nodes: 2
  gpus_per_node: 8
"""


def test_good_spec_loads_with_defaults_and_paths_relative_to_the_file(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, GOOD))
    assert spec.resources.nodes == 2 and spec.total_gpus == 16
    assert spec.code.args == ["--epochs", "3"]  # numbers become strings: they are argv
    assert spec.code_dir == tmp_path.resolve()
    assert spec.distribution.collective_timeout == 600


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD.replace("nodes: 2", "nodse: 2"), ["job.yaml:7", "resources.nodse", "did you mean 'nodes'"]),
        (GOOD.replace("nodes: 2", "nodes: two"), ["job.yaml:7", "resources.nodes", "valid integer", "'two'"]),
        (GOOD.replace("name: demo\n", ""), ["job.yaml:1", "name", "required"]),
        (GOOD.replace("args: [--epochs, 3]", "args: [--epochs, 3"), ["job.yaml:6", "malformed YAML"]),
        (GOOD + "resources:\n  nodes: 3\n", ["job.yaml:9", "key given twice", "first on line 6"]),
        (GOOD.replace("nodes: 2", "nodes: -1"), ["resources.nodes", "greater than or equal to 1"]),
        (GOOD + "limits: {max_runtime: 3 weeks}\n", ["job.yaml:9", "limits.max_runtime", "duration"]),
        (GOOD + "env: {SECRET: {secret: true}}\n", ["env.SECRET", "exactly one of `value` or `from_env`"]),
        (GOOD + "env: {1BAD: x}\n", ["env", "not a valid environment variable name"]),
        (GOOD + "env: {TOKEN: {value: s3cr3t, secret: true}}\n", ["env.TOKEN", "8 characters or more"]),
        (GOOD.replace("name: demo", "name: 'bad name!'"), ["job.yaml:1", "name", "letters, digits"]),
        (GOOD.replace("name: demo", 'name: "demo\\n"'), ["job.yaml:1", "name", "letters, digits"]),  # not `$`
        (GOOD + "distribution: {backend: smddp}\nresources: {gpus_per_node: 0}\n", ["smddp needs GPUs"]),
    ],
)
def test_bad_specs_name_the_field_and_line(tmp_path: Path, text: str, expected: list[str]) -> None:
    with pytest.raises(UserError) as info:
        load_spec(write(tmp_path, text))
    message = str(info.value)
    for part in expected:
        assert part in message, message


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "empty"),
        (b"\x00\x01\x02binary", "binary"),
        ("name: caf\xe9\n".encode("latin-1"), "not UTF-8"),
        (b"- just\n- a list\n", "mapping"),
        (
            b"a: &a [1,1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
            b"c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
            b"d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n",
            "expands to more than",
        ),
    ],
)
def test_files_that_are_not_specs_get_a_clear_error(tmp_path: Path, content: bytes, expected: str) -> None:
    with pytest.raises(UserError, match=expected):
        load_spec(write(tmp_path, content))


def test_overrides_apply_with_yaml_types_and_report_their_origin(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    spec = load_spec(path, ["resources.nodes=4", "resources.spot=true", "code.args=[--lr, '0.1']", "env.A=1"])
    assert spec.resources.nodes == 4 and spec.resources.spot is True
    assert spec.code.args == ["--lr", "0.1"]
    assert spec.env["A"].value == "1"
    with pytest.raises(SpecError, match=r"override -o resources.nodes=zero: resources.nodes"):
        load_spec(path, ["resources.nodes=zero"])
    with pytest.raises(UserError, match=r"expected key\.path=value"):
        load_spec(path, ["resources.nodes"])


def test_python_dicts_get_the_same_checks() -> None:
    spec = spec_from_dict({"name": "x", "resources": {"gpus_per_node": 4}}, overrides=["resources.nodes=2"])
    assert spec.total_gpus == 8
    with pytest.raises(SpecError, match="did you mean 'gpus_per_node'"):
        spec_from_dict({"name": "x", "resources": {"gpus_per_nod": 4}})


def test_durations() -> None:
    assert parse_duration("1h30m") == 5400
    assert parse_duration("2d") == 172800
    assert parse_duration(90) == 90
    for bad in ("", "soon", 0, -5, True, "30d"):
        with pytest.raises(ValueError):
            parse_duration(bad)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD.replace("nodes: 2", "nodse: 2"), "job.yaml:7: resources.nodse: unknown key; did you mean 'nodes'?"),
        (GOOD.replace("nodes: 2", "nodes: two"), "job.yaml:7: resources.nodes"),
        (GOOD.replace("name: demo\n", ""), "name: required field is missing"),
        (GOOD.replace("args: [--epochs, 3]", "args: [--epochs, 3"), "malformed YAML"),
    ],
)
def test_cli_exits_2_with_the_message_and_no_traceback(tmp_path: Path, text: str, expected: str) -> None:
    result = cli("validate", str(write(tmp_path, text)))
    assert result.returncode == 2
    assert expected in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_cli_bad_arguments_exit_2(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    assert cli("validate", str(tmp_path / "missing.yaml")).returncode == 2
    result = cli("render", str(path), "--backend", "lokal")
    assert result.returncode == 2 and "did you mean 'local'" in result.stderr
    assert cli("submit", str(path), "--no-such-flag").returncode == 2
    assert cli("status", "no-such-run").returncode == 2


def test_schema_is_json_schema_covering_every_section() -> None:
    result = cli("schema")
    assert result.returncode == 0
    schema = json.loads(result.stdout)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert set(JobSpec.model_fields) <= set(schema["properties"])
    assert schema["additionalProperties"] is False


def test_every_job_in_jobs_validates() -> None:
    jobs = sorted((ROOT / "jobs").glob("*.yaml"))
    assert jobs, "jobs/ holds the example specs"
    for path in jobs:
        load_spec(path)


def test_a_short_secret_is_refused_and_secret_values_stay_out_of_reprs_dumps_and_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError) as short:
        load_spec(write(tmp_path, GOOD + "env: {TOKEN: {value: s3cr3t, secret: true}}\n"))
    assert "s3cr3t" not in str(short.value)
    spec = load_spec(
        write(
            tmp_path, GOOD + "env: {TOKEN: {value: hunter2-hunter2, secret: true}, READ: {from_env: X, secret: true}}\n"
        )
    )
    assert "hunter2" not in repr(spec) + spec.model_dump_json() + str(spec.model_dump()) + repr(spec.env["TOKEN"])
    env, sources = rendered_env(spec)
    plan = Plan(backend="local", job_name="demo", request={"env": env}, env_sources=sources)
    with pytest.raises(UserError, match=r"env\.READ: the secret's value has fewer than 8 characters") as refused:
        plan.secret_values({"X": "abc"})  # from the shell: known only at launch
    assert "abc" not in str(refused.value)
    assert plan.secret_values({"X": "long-enough-value"}) == ["long-enough-value", "hunter2-hunter2"]


def test_the_job_spec_page_shows_every_section_and_limit_by_example_and_its_example_validates() -> None:
    """docs/job-spec.md ("every field by example") has every section of the spec, `slurm:`, `metrics:` and
    `limits.stall_timeout` among them, and its example validates."""
    import re

    import yaml

    from cloudddp.backends.plugins import spec_model

    page = (ROOT / "docs" / "job-spec.md").read_text()
    example = yaml.safe_load(re.search(r"```yaml\n(.*?)```", page, re.S).group(1))  # type: ignore[union-attr]
    assert set(spec_model().model_fields) <= set(example), set(spec_model().model_fields) - set(example)
    assert {"stall_timeout", "max_runtime"} <= set(example["limits"])
    example["code"]["dir"], example["inputs"]["cifar"]["path"] = ".", "."
    spec = spec_from_dict(example, base_dir=ROOT / "src_train")
    assert spec.limits.stall_timeout == 1200 and [m.name for m in spec.metrics.declared] == ["loss", "epoch"]
