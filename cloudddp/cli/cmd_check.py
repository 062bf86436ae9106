"""``check``: every registered backend's settings, credentials and reachability at once, each with its fix (what
``sky check`` gives): the settings a spec would need (:meth:`Backend.missing_settings`), then the backend's own
preflight (credentials, quota, the cluster or workspace answering) for a one-GPU job, or for a given spec."""

from __future__ import annotations

import concurrent.futures
import sys
import tempfile
from pathlib import Path

import click

from cloudddp.backends.checks import Check
from cloudddp.backends.commands import load_job, override_option
from cloudddp.backends.plugins import backend_class, backend_classes, spec_from_dict, user_config
from cloudddp.errors import UserError
from cloudddp.observe.console import escape, out, print_json
from cloudddp.runs.runner import get_backend
from cloudddp.spec.model import JobSpec
from cloudddp.spec.userconfig import config_path, shown

WAIT_SECONDS = 60
"""How long one backend's checks may take (a cloud sign-in that never answers is reported, not waited for)."""


def probe_spec(folder: Path, gpus: int) -> JobSpec:
    """The smallest job a backend can plan: one node, ``gpus`` GPUs, a script that prints a line."""
    (folder / "train.py").write_text("print('cloudddp check')\n")
    data = {"name": "check", "code": {"dir": str(folder), "entry": "train.py"}, "resources": {"gpus_per_node": gpus}}
    return spec_from_dict(data, base_dir=folder)


def backend_checks(name: str, spec: JobSpec) -> list[Check]:
    """The settings ``spec`` lacks for backend ``name`` (each with what to set), or else its preflight checks; for a
    backend the user configuration sets up, first that its settings are complete and where they came from."""
    impl = get_backend(name)
    missing = impl.missing_settings(spec)
    came = spec.settings_notes(name)
    if came and not missing:
        return [Check("settings", True, "complete; " + "; ".join(came)), *impl.preflight(impl.render(spec))]
    if missing:
        return [
            Check(
                f"setting {m.field}",
                False,
                m.what,
                fix=(f"export {m.env}=... or " if m.env else "")
                + f"add to the spec (or to {shown(config_path())}): {m.field}: {m.example}",
            )
            for m in missing
        ]
    return impl.preflight(impl.render(spec))


def checked(name: str, spec: JobSpec) -> list[Check]:
    """``backend_checks`` in a worker thread, with a user error (a missing SDK, no credentials) as a failed check
    and an answer that does not come in :data:`WAIT_SECONDS` as an unknown one."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(backend_checks, name, spec).result(timeout=WAIT_SECONDS)
    except UserError as e:
        message = str(e).split("\nhint: ")[0]
        return [Check("usable", False, message, fix=e.hint or "")]
    except concurrent.futures.TimeoutError:
        return [Check("answers", None, f"no answer in {WAIT_SECONDS} s", fix="check the network and try again")]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


@click.command()
@click.argument("job", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--backend", "-b", "only", default=None, help="Check only this backend.")
@override_option
@click.option("--json", "json_", is_flag=True, help="Print machine-readable JSON.")
def check(job: Path | None, only: str | None, override: tuple[str, ...], json_: bool) -> None:
    """Is every backend ready? Its settings, credentials and reachability, each with the fix. Without JOB, for a
    one-GPU job (no GPU for backends that rent none); with JOB, for that job. With --backend, exit 1 when one of
    its checks failed (the overview of all of them exits 0).

    \b
    Examples:
      cloudddp check
      cloudddp check job.yaml -b azureml
    """
    names = [backend_class(only).name] if only else [cls.name for cls in backend_classes()]
    results: dict[str, list[Check]] = {}
    with tempfile.TemporaryDirectory(prefix="cloudddp-check-") as tmp:
        for name in names:
            gpus = 1 if backend_class(name).cloud else 0
            spec = load_job(job, override) if job else probe_spec(Path(tmp), gpus)
            results[name] = checked(name, spec)
    if json_:
        print_json({name: [c.to_dict() for c in checks] for name, checks in results.items()})
    else:
        print_config()
        print_table(results)
    if only and any(c.ok is False for c in results[names[0]]):
        sys.exit(1)


def print_config() -> None:
    """The user configuration this check read (or where it would be), and the backends it sets up."""
    found = user_config()
    if found is None:
        out().print(f"user configuration: none ({escape(shown(config_path()))} when it exists; `cloudddp config path`)")
        return
    configured = ", ".join(found.backends) or "none"
    out().print(f"user configuration: {escape(shown(found.path))} (backends -b auto tries: {escape(configured)})")


def print_table(results: dict[str, list[Check]]) -> None:
    from rich.table import Table

    table = Table("backend", "", "check", "detail", "fix", show_lines=True)
    for name, checks in results.items():
        for i, c in enumerate(checks):
            mark = {True: "[green]✓[/]", False: "[red]✗[/]", None: "[yellow]?[/]"}[c.ok]
            fix = escape(c.fix) if c.ok is not True else ""
            table.add_row(name if i == 0 else "", mark, escape(c.name), escape(c.detail), fix)
    out().print(table)
    ready = [name for name, checks in results.items() if all(c.ok for c in checks)]
    out().print(f"ready: {', '.join(ready) if ready else 'none'}")
