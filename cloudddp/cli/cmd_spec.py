"""The commands about a job spec itself, offline: ``validate``, ``render``, ``schema`` and ``init``.

No network, no credentials, no run database: nothing here imports :mod:`cloudddp.api` or :mod:`cloudddp.runs`,
and ``render`` imports only the backend it renders for.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from cloudddp.backends.checks import SettingsMissing
from cloudddp.backends.commands import json_option, load_job, override_option
from cloudddp.backends.plugins import backend_class, json_schema
from cloudddp.cli.options import (
    backend_option,
    job_argument,
    print_plan,
)
from cloudddp.code.shipped import snapshot_warnings
from cloudddp.errors import UserError
from cloudddp.observe.console import note, ok, print_json
from cloudddp.plan import Plan
from cloudddp.runtime import code_problem, code_snapshot
from cloudddp.spec.load import where_set
from cloudddp.spec.model import JobSpec
from cloudddp.spec.scaffold import init as scaffold


@click.command()
@job_argument
@backend_option(None, "Also check this backend's settings (all missing ones at once) and render for it, offline.")
@override_option
@json_option
def validate(job: Path, backend: str | None, override: tuple[str, ...], json_: bool) -> None:
    """Check a job spec and report every problem with its line: the fields, and that the code it runs is there.
    With -b BACKEND, also every setting that backend needs and the spec lacks (each with an example value), and
    whatever its render would refuse. With --json, one JSON document on stdout whether it is valid or not.

    \b
    Examples:
      cloudddp validate job.yaml
      cloudddp validate job.yaml -b sagemaker --json
    """
    try:
        spec = load_job(job, override)
        problem = code_problem(spec)
        if problem is not None:
            field, error = problem
            raise UserError(f"{where_set(job, field, override)}: {error.args[0]}", hint=error.hint)
        rendered = check_backend(spec, backend) if backend else None
    except UserError as e:
        if not json_:
            raise
        problems = getattr(e, "problems", None) or [e.args[0]]
        print_json({"ok": False, "problems": problems, **({"hint": e.hint} if e.hint else {})})
        sys.exit(e.exit_code)
    if json_:
        done = {"ok": True, "spec": spec.model_dump(mode="json", exclude_defaults=True)}
        print_json({**done, **({"backend": backend, "warnings": rendered.warnings} if rendered else {})})
        return
    r = spec.resources
    where = f"{r.gpus_per_node} GPU(s) per node" if r.gpus_per_node else "CPU"
    ok(f"{job}: job {spec.name!r}, {r.nodes} node(s), {where}")
    if rendered is not None:
        for warning in rendered.warnings:
            note(warning, warning=True)
        ok(
            f"the {backend} backend has every setting it needs and renders the job; "
            f"what needs the target itself (credentials, quota, data): cloudddp doctor {job} -b {backend}"
        )


def check_backend(spec: JobSpec, backend: str) -> Plan:
    """Every setting ``backend`` needs and ``spec`` lacks, in one error; else its (offline) render."""
    impl = backend_class(backend)()
    missing = impl.missing_settings(spec)
    if missing:
        raise SettingsMissing(backend, missing)
    return impl.render(spec)


@click.command()
@job_argument
@backend_option()
@override_option
@json_option
@click.option(
    "--output-dir",
    "output",
    type=click.Path(path_type=Path, file_okay=False),
    help="Also write each document into this folder.",
)
@click.option(
    "--list-files",
    is_flag=True,
    help="List the files the code snapshot holds (after every ignore rule) instead of the plan.",
)
def render(
    job: Path, backend: str, override: tuple[str, ...], json_: bool, output: Path | None, list_files: bool
) -> None:
    """Print exactly what a backend would send (no network, no credentials).

    \b
    Examples:
      cloudddp render job.yaml -b sagemaker
      cloudddp render job.yaml -b azureml --output-dir rendered/
      cloudddp render job.yaml --list-files
    """
    spec = load_job(job, override)
    if list_files:
        snapshot = code_snapshot(spec)
        if json_:
            print_json(
                {
                    "files": list(snapshot.files),
                    "left_out_as_credentials": list(snapshot.left_out),
                    "left_out_as_inputs": dict(snapshot.inputs_left_out),
                    "left_out_for_secrets": list(snapshot.secrets_left_out),
                }
            )
            return
        sys.stdout.write("".join(f"{name}\n" for name in snapshot.files))
        for line in snapshot_warnings(snapshot):
            note(line, warning=True)
        return
    plan = backend_class(backend)().render(spec)
    if output is not None:
        output.mkdir(parents=True, exist_ok=True)
        for name, body in plan.documents.items():
            (output / name).write_text(body)
    print_plan(plan, json_=json_)


@click.command()
@click.option("--output", "-O", type=click.Path(path_type=Path, dir_okay=False), help="Write to this file.")
def schema(output: Path | None) -> None:
    """The JSON Schema of job specs, for editors (yaml-language-server: $schema=...).

    \b
    Example:
      cloudddp schema -O job.schema.json
    """
    text = json.dumps(json_schema(), indent=2) + "\n"
    if output:
        output.write_text(text)
        click.echo(f"wrote {output}", err=True)
    else:
        sys.stdout.write(text)


@click.command()
@click.argument("path", type=click.Path(path_type=Path), default=Path("."))
@click.option("--name", default=None, help="Job name (default: the folder's name).")
@click.option("--with-script", is_flag=True, help="Also copy the shared DDP training script into ./src_train.")
@click.option("--force", is_flag=True, help="Overwrite existing files.")
def init(path: Path, name: str | None, with_script: bool, force: bool) -> None:
    """Write a project that runs as it is: a commented job spec, its JSON Schema for editors, and a small DDP
    script of your own to edit (or, with --with-script, the shared training script).

    \b
    Example:
      cloudddp init my-project && cloudddp submit my-project/job.yaml
    """
    for line in scaffold(path, schema=json_schema(), name=name, with_script=with_script, force=force):
        click.echo(line)
    spec = path if path.suffix in (".yaml", ".yml") else path / "job.yaml"
    click.echo(f"next: cloudddp submit {spec}")
