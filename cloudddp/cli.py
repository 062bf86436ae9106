"""The ``cloudddp`` command line (click; rich only where a command draws a table).

Exit codes: 0 ok, 1 the run failed, 2 bad input (spec, arguments, missing credentials), with a message
and no traceback. ``cloudddp --help`` imports neither torch nor any cloud SDK: backends are imported
when a command needs one, and they import their SDK only where they talk to the cloud.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from .console import Progress, err, escape, note, out
from .errors import CloudDDPError, RunFailed

F = TypeVar("F", bound=Callable[..., Any])
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 110}


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="cloudddp", message="cloudddp %(version)s")
def app() -> None:
    """Run PyTorch DDP training anywhere from one job spec: locally with torchrun or on any registered backend
    (`cloudddp backends` lists them)."""


def job_argument(f: F) -> F:
    return click.argument("job", type=click.Path(path_type=Path, dir_okay=False))(f)


def _registered(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    from click.shell_completion import CompletionItem

    from .backends import names

    return [CompletionItem(name) for name in names() if name.startswith(incomplete)]


class BackendOption(click.Option):
    """``--backend``: its help lists the registered backends, read only when help is shown."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        from .backends import names

        self.help = f"{self.help} One of: {', '.join(names())}."
        return super().get_help_record(ctx)


def backend_option(default: str | None = "local", help: str = "The backend to use.") -> Callable[[F], F]:
    return click.option(
        "--backend",
        "-b",
        cls=BackendOption,
        default=default,
        show_default=default is not None,
        envvar="CLOUDDDP_BACKEND" if default else None,
        help=help,
        shell_complete=_registered,
    )


def override_option(f: F) -> F:
    return click.option(
        "--override",
        "-o",
        "override",
        multiple=True,
        metavar="KEY=VALUE",
        help="Override a spec field: -o resources.nodes=2 (repeatable).",
    )(f)


def json_option(f: F) -> F:
    return click.option("--json", "json_", is_flag=True, help="Print machine-readable JSON.")(f)


def run_arguments(f: F) -> F:
    f = backend_option(None, "Look the run up at this backend (runs started elsewhere).")(f)
    return click.argument("run")(f)


def follow_option(f: F) -> F:
    return click.option("--follow", "-f", is_flag=True, help="Keep printing until the run ends.")(f)


def _fail(e: CloudDDPError) -> NoReturn:
    click.secho("error: ", fg="red", bold=True, nl=False, err=True)
    click.echo(str(e), err=True)
    sys.exit(e.exit_code)


def _job(path: Path, overrides: Sequence[str] | None) -> Any:
    from .api import Job

    return Job.load(path, overrides or [])


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _plan_notes(plan: Any) -> None:
    for d in plan.decisions:
        note(d)
    for w in plan.warnings:
        note(w, warning=True)


def _format_record(record: Any) -> str:
    parts = []
    if record.epoch is not None:
        parts.append(f"epoch {record.epoch}")
    if record.step is not None:
        parts.append(f"step {record.step}")
    for k, v in record.values.items():
        parts.append(f"{k}={v:.4g}")
    return "  ".join(parts)


# -- commands --------------------------------------------------------------------------------------


@app.command()
@job_argument
@override_option
@json_option
def validate(job: Path, override: tuple[str, ...], json_: bool) -> None:
    """Check a job spec and report every problem with its line."""
    spec = _job(job, override).spec
    if json_:
        _print_json({"ok": True, "spec": spec.model_dump(mode="json", exclude_defaults=True)})
        return
    r = spec.resources
    where = f"{r.gpus_per_node} GPU(s) per node" if r.gpus_per_node else "CPU"
    out().print(f"[green]ok[/] {escape(str(job))}: job {spec.name!r}, {r.nodes} node(s), {where}")


@app.command()
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
def render(job: Path, backend: str, override: tuple[str, ...], json_: bool, output: Path | None) -> None:
    """Print exactly what a backend would send (no network, no credentials)."""
    plan = _job(job, override).render(backend)
    if output is not None:
        output.mkdir(parents=True, exist_ok=True)
        for name, body in plan.documents.items():
            (output / name).write_text(body)
    if json_:
        _print_json(plan.to_dict())
        return
    sys.stdout.write(plan.text())
    _plan_notes(plan)


@app.command()
@job_argument
@backend_option()
@override_option
@click.option("--dry-run", is_flag=True, help="Render only; send nothing.")
@click.option("--detach", "-d", is_flag=True, help="Return after launching.")
@json_option
@click.option("--quiet", "-q", is_flag=True, help="Print only the run id.")
@click.option("--no-provision", is_flag=True, help="Leave clusters alone (backends that create or resize them).")
@click.option("--skip-checks", is_flag=True, help="Launch even when preflight checks fail.")
@click.option("--all-ranks", is_flag=True, help="Show every process's output while following (default: rank 0's).")
@click.option(
    "--recover",
    "recover",
    type=int,
    default=None,
    is_flag=False,
    flag_value=3,
    metavar="[N]",
    help="Resubmit up to N times (3) after preemption, lost capacity or an infrastructure fault.",
)
def submit(
    job: Path,
    backend: str,
    override: tuple[str, ...],
    dry_run: bool,
    detach: bool,
    json_: bool,
    quiet: bool,
    no_provision: bool,
    skip_checks: bool,
    all_ranks: bool,
    recover: int | None,
) -> None:
    """Render the job and launch it; follow its metrics until it ends unless --detach."""
    from .api import Run
    from .backends import get_backend
    from .backends.base import PreflightFailed

    spec = _job(job, override).spec
    impl = get_backend(backend)
    if dry_run:
        plan = impl.render(spec)
        if json_:
            _print_json(plan.to_dict())
        else:
            sys.stdout.write(plan.text())
            _plan_notes(plan)
        return
    try:
        submission = impl.submit(
            spec,
            checks=not skip_checks,
            provision=not no_provision,
            progress=None if (quiet or json_) else Progress(_plan_notes),
        )
    except PreflightFailed as e:
        _print_checks(e.checks)
        err().print("[bold red]error:[/] preflight checks failed; fix them or pass --skip-checks")
        sys.exit(e.exit_code)
    run_id = submission.run_id
    budget = spec.limits.max_recoveries if recover is None else recover
    if budget > 0:
        from . import recovery

        chain = recovery.start_for(impl, spec, submission, budget)
        if not (quiet or json_):
            moves = f"; after {chain.capacity_tries} capacity failure(s) on a size it moves to " + ", then ".join(
                f["size"] for f in chain.fallbacks
            )
            note(
                f"recovery: up to {budget} resubmissions after preemption or infrastructure faults, by a "
                "watcher that outlives this terminal" + (moves if chain.fallbacks else "")
            )
    if json_:
        _print_json({"run_id": run_id, "backend": backend})
    elif quiet:
        out().print(run_id)
    else:
        err().print(f"[bold]submitted[/] {run_id} ({backend})")
    if detach:
        return
    _follow_run(
        Run(run_id, impl, plan=submission.plan), quiet=quiet or json_, epochs=_epochs_of(spec), all_ranks=all_ranks
    )


def _epochs_of(spec: Any) -> int | None:
    from .sizing import script_arg

    value = script_arg(list(spec.code.args), "--epochs")
    return int(value) if value and value.isdigit() else None


def _event_text(event: Any) -> str:
    """A metric record in cyan; a log line as the script printed it, with where it came from."""
    from .metrics import MetricRecord

    if isinstance(event, MetricRecord):
        return f"[cyan]{escape(_format_record(event))}[/]"
    return f"[dim]\\[{escape(event.source)}][/] {escape(event.text)}"


def _follow_run(run: Any, *, quiet: bool, epochs: int | None = None, all_ranks: bool = False) -> None:
    """Print what the run reports as it arrives: metric records, and the script's own output (rank 0's
    unless ``all_ranks``); on a terminal, above an epoch bar with the elapsed time."""
    from .metrics import MetricRecord

    try:
        if quiet:
            for _ in run.metrics(follow=True):
                pass
        elif sys.stderr.isatty() and epochs:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            with Bar(TextColumn("epoch"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err()) as bar:
                task = bar.add_task("epochs", total=epochs)
                for event in run.events(follow=True, all_ranks=all_ranks):
                    bar.console.print(_event_text(event))
                    if isinstance(event, MetricRecord) and event.epoch is not None and "epoch_time" in event.values:
                        bar.update(task, completed=event.epoch)
        else:
            for event in run.events(follow=True, all_ranks=all_ranks):
                out().print(_event_text(event))
        status = run.wait(poll=0.2)
    except KeyboardInterrupt:
        err().print(
            f"\ndetached; the run goes on. Follow it: cloudddp metrics {run.run_id} -f   "
            f"stop it: cloudddp cancel {run.run_id}"
        )
        sys.exit(130)
    _print_end(status, quiet=quiet)
    if status.state.value == "failed":
        sys.exit(RunFailed.exit_code)


def _print_end(status: Any, *, quiet: bool) -> None:
    colour = {"succeeded": "green", "failed": "red", "cancelled": "yellow"}.get(status.state.value, "white")
    if quiet:
        return
    err().print(f"[bold {colour}]{status.state.value}[/] {status.run_id}: {escape(status.message)}")
    failure = status.details.get("failure")
    if failure and failure.get("log_tail"):
        err().print("[dim]last lines of the failed rank:[/]")
        for line in failure["log_tail"][-10:]:
            err().print(f"  {escape(line)}")


@app.command()
@job_argument
@backend_option()
@override_option
@json_option
def doctor(job: Path, backend: str, override: tuple[str, ...], json_: bool) -> None:
    """Check before launching: the plan's own checks, then credentials, quota, sizes and data at the target."""
    from .backends import get_backend

    impl = get_backend(backend)
    plan = impl.render(_job(job, override).spec)
    checks = impl.preflight(plan)
    if json_:
        _print_json({"warnings": plan.warnings, "checks": [c.to_dict() for c in checks]})
    else:
        _plan_notes(plan)
        _print_checks(checks)
    if any(c.ok is False for c in checks):
        sys.exit(2)


def _print_checks(checks: list[Any]) -> None:
    for c in checks:
        mark = {True: "[green]✓[/]", False: "[red]✗[/]", None: "[yellow]?[/]"}[c.ok]
        out().print(f"{mark} {escape(c.name)}" + (f" [dim]— {escape(c.detail)}[/]" if c.detail else ""))
        if c.ok is False and c.fix:
            out().print(f"    [bold]fix:[/] {escape(c.fix)}")


def _money(v: float | None) -> str:
    if v is None:
        return "?"
    return f"${v:,.2f}" if abs(v) >= 1 or v == 0 else f"${v:.2g}"


def _selection_table(rows: list[dict[str, Any]], *, explain: bool) -> Any:
    """Sizes with their verdicts; with ``explain`` also the rejected ones, then a second table with each size's
    lifecycle and what each part of the job costs (billed time per node and its price for all nodes)."""
    from rich.console import Group
    from rich.table import Table

    def part(cell: dict[str, Any] | None) -> str:
        if not cell:
            return "?"
        secs = cell["s"]
        when = f"{secs:.0f}s" if secs < 120 else f"{secs / 60:.0f}m" if secs < 7200 else f"{secs / 3600:.1f}h"
        return f"{_money(cell['cost'])} {when}"

    table = Table(
        "size", "GPUs", "GPU mem", "fabric", "price/h", "est. cost", "efficiency", "verdict", show_lines=False
    )
    parts = Table(
        "size",
        "lifecycle",
        "startup",
        "training",
        "checkpoint",
        "shutdown",
        "idle",
        "total",
        title="cost of each part: price for all nodes, billed time per node",
        show_lines=False,
    )
    for i, row in enumerate(rows):
        if not row["ok"] and not explain:
            continue
        verdict = "[green]chosen[/] " if i == 0 and row["ok"] else "[green]ok[/] " if row["ok"] else "[red]rejected[/] "
        price = _money(row["price_per_hour"]) + ("*" if row["price_kind"] == "ec2-proxy" else "")
        eff = f"{row['efficiency']:.0%}" if row["efficiency"] is not None else "?"
        why = "; ".join([row["why"], *row["warnings"]]) if row["why"] or row["warnings"] else ""
        table.add_row(
            row["size"],
            row["gpus"],
            f"{row['gpu_memory_gb']:g} GB",
            row["fabric"],
            price,
            _money(row["est_cost"]),
            eff,
            verdict + escape(why),
        )
        breakdown = row.get("breakdown") or {}
        parts.add_row(
            row["size"],
            row.get("lifecycle", ""),
            *(part(breakdown.get(p)) for p in ("startup", "training", "checkpoint", "shutdown", "idle")),
            _money(row["est_cost"]),
        )
    return Group(table, parts) if explain else table


@app.command()
@click.option("--cloud", default=None, help="A cloud of the catalog (e.g. azure, aws); default: the backend's.")
@backend_option(None, "Rank the sizes of this backend's cloud.")
@click.option("--gpus", type=int, default=None, help="Total GPUs (default 8).")
@click.option("--gpu", default=None, help="GPU model, e.g. A100.")
@click.option("--min-mem", type=float, default=None, help="Minimum GB per GPU.")
@click.option("--nodes", type=int, default=None, help="Nodes (with --gpus-per-node).")
@click.option("--gpus-per-node", type=int, default=None)
@click.option("--spot", is_flag=True, help="Spot / low priority.")
@click.option("--smddp", is_flag=True, help="SageMaker's data-parallel library (AWS).")
@click.option(
    "--model", default="resnet18", show_default=True, help="Workload for the estimate: resnet18, resnet50, cnn."
)
@click.option("--dataset", default="cifar10", show_default=True, help="cifar10, imagenet, digits.")
@click.option("--epochs", type=int, default=30, show_default=True)
@click.option("--batch", type=int, default=256, show_default=True, help="Per-GPU batch.")
@click.option("--explain", is_flag=True, help="Also list rejected sizes with the reason.")
@json_option
def skus(
    cloud: str | None,
    backend: str | None,
    gpus: int | None,
    gpu: str | None,
    min_mem: float | None,
    nodes: int | None,
    gpus_per_node: int | None,
    spot: bool,
    smddp: bool,
    model: str,
    dataset: str,
    epochs: int,
    batch: int,
    explain: bool,
    json_: bool,
) -> None:
    """GPU sizes for a job, ranked by the estimated cost of the whole job, each with its reasons."""
    from .catalog import CATALOG_DATE, Requirements, all_skus, select, workload_for_model
    from .catalog.model import DATASET_SAMPLES
    from .errors import UserError

    if cloud is None:
        from .backends import backend_class, backend_classes

        sized = [cls for cls in backend_classes() if cls.cloud]
        chosen = backend_class(backend) if backend else (sized[0] if sized else None)
        if chosen is None or chosen.cloud is None:
            raise UserError(f"the {backend} backend chooses no size", hint="give --cloud or a backend with a cloud")
        cloud = chosen.cloud
    known = sorted({sku.cloud for sku in all_skus()})
    if cloud not in known:
        raise UserError(f"--cloud {cloud!r}: the catalog has sizes for {', '.join(known)}")

    if dataset not in DATASET_SAMPLES:
        raise UserError(f"--dataset {dataset!r}: use one of {', '.join(DATASET_SAMPLES)}")
    workload = workload_for_model(model, DATASET_SAMPLES[dataset], epochs, batch)
    if workload is None:
        raise UserError(f"--model {model!r}: use resnet18, resnet18-imagenet, resnet50 or cnn")
    req = Requirements(
        cloud=cloud,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        total_gpus=gpus or (None if nodes else 8),
        accelerator=gpu,
        min_gpu_memory_gb=min_mem,
        spot=spot,
        smddp=smddp,
        workload=workload,
    )
    selection = select(req)
    if json_:
        _print_json(selection.to_dict())
        return
    out().print(_selection_table(selection.explain(), explain=explain))
    out().print(
        f"[dim]catalog of {CATALOG_DATE}; estimate for {model} on {dataset}, {epochs} epochs, batch {batch}/GPU; "
        "* = EC2 on-demand price, a lower bound for SageMaker[/]"
    )
    if selection.chosen is None:
        err().print("[yellow]no size fits; --explain shows why each was rejected[/]")


@app.command()
@job_argument
@backend_option(None, "The backend whose sizes to rank (required).")
@override_option
@click.option("--explain", is_flag=True, help="List every size with its verdict.")
@json_option
def plan(job: Path, backend: str | None, override: tuple[str, ...], explain: bool, json_: bool) -> None:
    """The size a backend would use for the job, why, its cost estimate and the NCCL/EFA presets applied."""
    from .backends import get_backend
    from .sizing import choose

    if backend is None:
        from .backends import backend_classes
        from .errors import UserError

        sized = [cls.name for cls in backend_classes() if cls.cloud]
        raise UserError("give --backend: the backend whose sizes to rank", hint=f"one of: {', '.join(sized)}")
    spec = _job(job, override).spec
    impl = get_backend(backend)
    rendered = impl.render(spec)
    target = impl.size_target(spec)
    selection = choose(spec, target) if target is not None and spec.resources.gpus_per_node else None
    if json_:
        _print_json({"plan": rendered.to_dict(), "selection": selection.to_dict() if selection else None})
        return
    _plan_notes(rendered)
    if target is None:
        note(f"the {impl.name} backend chooses no size here: its plan is above")
    if rendered.estimate:
        out().print("[bold]estimate[/] " + ", ".join(f"{k}={v}" for k, v in rendered.estimate.items()))
    if selection is not None:
        out().print(_selection_table(selection.explain(), explain=explain))


@app.command()
@run_arguments
@json_option
def status(run: str, backend: str | None, json_: bool) -> None:
    """Show a run's state."""
    from .api import Run

    st = Run.attach(run, backend).status()
    if json_:
        _print_json(st.to_dict())
        return
    from rich.table import Table

    table = Table(show_header=False, box=None)
    for key, value in (
        ("run", st.run_id),
        ("backend", st.backend),
        ("state", st.state.value),
        ("message", st.message),
        ("cause", st.cause.value if st.cause else ""),
        ("created", _when(st.created_at)),
        ("ended", _when(st.ended_at)),
    ):
        if value:
            table.add_row(f"[bold]{key}[/]", escape(str(value)))
    for key, value in st.details.items():
        if key not in ("failure", "attempts"):
            table.add_row(f"[bold]{key}[/]", escape(str(value)))
    out().print(table)
    if st.details.get("attempts"):
        attempts = Table("attempt", "run", "started", "state", "cause", "why", title="attempts")
        for a in st.details["attempts"]:
            attempts.add_row(
                str(a["number"]),
                a["run_id"],
                _when(a["started"]),
                a["state"],
                a["cause"] or "",
                escape(a["reason"] or ""),
            )
        out().print(attempts)
    failure = st.details.get("failure")
    if failure:
        out().print("[bold red]failure[/]")
        for k, v in failure.items():
            if k != "log_tail":
                out().print(f"  {k}: {v}")
        for line in failure.get("log_tail", [])[-20:]:
            out().print(f"  | {escape(line)}")


@app.command()
@run_arguments
@json_option
def cost(run: str, backend: str | None, json_: bool) -> None:
    """What a run cost (so far, while it goes) next to what was estimated at submit, each figure with its source."""
    from .api import Run

    report = Run.attach(run, backend).cost()
    if json_:
        _print_json(report.to_dict())
        return
    out().print(_cost_text(report))


def _seconds(v: Any) -> str:
    if not isinstance(v, (int, float)):
        return ""
    return f"{v:,.0f} s" if v < 7200 else f"{v / 3600:,.2f} h"


def _cost_text(report: Any) -> Any:
    """The report as a table of estimate vs actual, then where each actual figure came from."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    est, bill = report.estimate or {}, report.bill
    head = Text.from_markup(f"[bold]{escape(report.run_id)}[/] ({report.backend}, {report.state})")
    table = Table("", "estimate at submit", "actual" + ("" if bill is None or bill.final else " so far"), box=None)
    priced = bill is not None and bill.price_per_hour is not None
    price = est.get("price_per_hour")
    actual = _money(report.actual_cost) if report.actual_cost is not None else ""
    if report.attempts:
        actual += f" over {len(report.attempts)} attempts"
    if report.difference is not None:
        actual += f" ({report.difference:+.0%})"
    rows = [
        ("on", "", f"{bill.size} × {bill.nodes}" if bill else ""),
        ("training (est.) / processes ran", _seconds(est.get("training_s")), _seconds(bill.ran_s) if bill else ""),
        ("billed per node", _seconds(est.get("billed_s")), _seconds(bill.billed_s) if bill and priced else ""),
        ("still to be billed per node", "", _seconds(bill.pending_s) if bill and bill.pending_s else ""),
        (
            "price, all nodes",
            f"{_money(price)}/h" if price is not None else "",
            f"{_money(bill.price_per_hour)}/h" if bill and bill.price_per_hour is not None else "",
        ),
        ("[bold]cost[/]", _money(report.estimated_cost) if report.estimated_cost is not None else "", actual),
        (
            bill.resource_unit if bill else "",
            "",
            f"{bill.resource_hours:,.4g}" if bill and bill.resource_hours is not None else "",
        ),
        ("spot savings", "", f"{bill.savings:.0%}" if bill and bill.savings is not None else ""),
    ]
    for name, estimated, measured_value in rows:
        if estimated or measured_value:
            table.add_row(name, estimated, measured_value)
    parts: list[Any] = [head, table]
    for attempt in report.attempts:
        parts.append(Text(f"attempt {attempt['run_id']} ({attempt['state']}): {_money(attempt['cost'])}"))
    if bill is not None:
        title = "[dim]the actual figures" + (" of the current attempt" if report.attempts else "") + "[/]"
        sources = Table("figure", "value", "where it comes from", box=None, title_justify="left", title=title)
        for f in bill.figures:
            value = "?" if f.value is None else f"{f.value:,}" if isinstance(f.value, (int, float)) else str(f.value)
            sources.add_row(f.name, f"{value} {f.unit}".strip(), escape(f.source))
        parts.append(sources)
        parts += [Text(f"not in these figures: {n}", style="dim") for n in bill.notes]
    if est.get("step_basis"):
        basis = "the cost model's" if est["step_basis"] == "model" else est["step_basis"]
        parts.append(Text(f"the estimate's step time: {basis}", style="dim"))
    if report.reason:
        parts.append(Text(report.reason, style="yellow"))
    if report.max_cost is not None:
        watch = report.budget
        what = (
            watch.get("message")
            or (f"the watch could not go on: {watch['failed']}" if "failed" in watch else "")
            or (
                f"watched (pid {watch['watch_pid']}, every {watch.get('poll_s', 0):g} s)"
                if "watch_pid" in watch
                else "not enforced on this backend"
            )
        )
        parts.append(Text(f"budget {_money(report.max_cost)}: {what}"))
    measured = report.measured or {}
    if "step_s" in measured:
        parts.append(
            Text(
                f"step time kept for the next estimate on {measured['key'].split('|', 1)[1]}: "
                f"{measured['step_s']:.4g} s ({measured['how']})",
                style="dim",
            )
        )
    elif "none" in measured:
        parts.append(Text(f"no step time kept: {measured['none']}", style="dim"))
    return Group(*parts)


@app.command()
@click.argument("run", required=False)
def recover(run: str | None) -> None:
    """Pick up recovery where it stopped: start the watcher again for RUN (or for every run still under
    recovery whose watcher is gone, e.g. after this machine restarted)."""
    from . import recovery
    from .api import Run
    from .registry import home

    if run is not None:
        chains = [c for c in [Run.attach(run).chain] if c is not None]
        if not chains:
            from .errors import UserError

            raise UserError(f"{run} was not submitted with recovery", hint="submit it with --recover")
    else:
        chains = [recovery.Chain.load(p.stem) for p in sorted((home() / "chains").glob("*.json"))]
    for chain in chains:
        restarted = recovery.ensure_watched(chain)
        what = (
            "watcher started again" if restarted else ("watched" if chain.status == recovery.WATCHING else chain.status)
        )
        err().print(f"{chain.chain_id}: attempt {chain.current.number}, {what}")


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else ""


@app.command()
@run_arguments
@follow_option
@json_option
def logs(run: str, follow: bool, backend: str | None, json_: bool) -> None:
    """Print a run's logs, each line prefixed by the rank or host it came from."""
    from .api import Run

    handle = Run.attach(run, backend)
    try:
        for line in handle.logs(follow=follow):
            if json_:
                sys.stdout.write(json.dumps({"source": line.source, "text": line.text, "time": line.time}) + "\n")
            else:
                sys.stdout.write(f"[{line.source}] {line.text}\n" if line.source else f"{line.text}\n")
            sys.stdout.flush()
    except KeyboardInterrupt:
        sys.exit(130)


@app.command()
@run_arguments
@follow_option
@json_option
@click.option(
    "--plot",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write a PNG chart of every metric over steps (needs matplotlib).",
)
def metrics(run: str, follow: bool, backend: str | None, json_: bool, plot: Path | None) -> None:
    """Print a run's metrics (from the training script's metric lines); a live table with -f on a terminal."""
    from .api import Run

    handle = Run.attach(run, backend)
    if plot is not None:
        from .plotting import plot_metrics

        plot_metrics(
            list(handle.metrics(follow=follow)), title=f"{handle.run_id} ({handle.status().state.value})", path=plot
        )
        err().print(f"wrote {plot}")
        return
    try:
        if follow and not json_ and sys.stdout.isatty():
            from .live import follow_table

            follow_table(handle.metrics(follow=True), lambda: handle.status().state.value, handle.run_id)
            return
        for record in handle.metrics(follow=follow):
            if json_:
                sys.stdout.write(json.dumps(record.to_dict()) + "\n")
            else:
                out().print(_format_record(record))
            sys.stdout.flush()
    except KeyboardInterrupt:
        sys.exit(130)


@app.command()
@run_arguments
def cancel(run: str, backend: str | None) -> None:
    """Stop a run: the training script checkpoints, then every process of the run ends."""
    from .api import Run

    handle = Run.attach(run, backend)
    requested = handle.cancel()
    st = handle.status()
    if requested:
        err().print(f"{st.run_id}: {st.state.value}")
    else:
        err().print(f"{st.run_id} had already ended ({st.state.value}): nothing to cancel")


@app.command("list")
@click.option("--backend", "-b", default=None, help="Only runs of this backend.")
@click.option("--state", "-s", default=None, help="Only runs in this state (as last seen: running, failed...).")
@click.option("--name", default=None, help="Only runs of this job name; wildcards allowed: --name 'cifar*'.")
@click.option(
    "--limit", "-n", default=50, show_default=True, type=click.IntRange(min=0), help="At most this many runs (0: all)."
)
@click.option("--before", default=None, metavar="RUN", help="Only runs submitted before RUN: the next page after it.")
@json_option
def list_(
    backend: str | None, state: str | None, name: str | None, limit: int, before: str | None, json_: bool
) -> None:
    """Runs submitted from this machine, newest first, a page at a time."""
    from .errors import UserError
    from .registry import Registry

    registry = Registry()
    after = None
    if before is not None:
        found = registry.find(before)
        exact = [r for r in found if r.run_id == before]
        if len(exact or found) != 1:
            raise UserError(
                f"--before {before}: "
                + (
                    "no such run in this machine's registry"
                    if not found
                    else f"matches {len(found)} runs; give more of the id"
                )
            )
        after = (exact or found)[0]
    records = registry.list(backend=backend, limit=limit + 1 if limit else None, state=state, name=name, before=after)
    more = bool(limit) and len(records) > limit
    records = records[:limit] if limit else records
    if json_:
        _print_json(
            [
                {"run_id": r.run_id, "backend": r.backend, "name": r.name, "state": r.state, "created_at": r.created_at}
                for r in records
            ]
        )
        return
    from rich.table import Table

    table = Table("run", "backend", "state", "created")
    for r in records:
        table.add_row(r.run_id, r.backend, r.state, _when(r.created_at))
    out().print(table)
    if more:
        import shlex

        total = registry.count(backend=backend, state=state, name=name)
        again = " ".join(
            f"{flag} {shlex.quote(str(value))}"
            for flag, value in (("--backend", backend), ("--state", state), ("--name", name), ("--limit", limit))
            if value
        )
        err().print(
            f"[dim]{len(records)} shown of {total:,} matching runs; the next page: "
            f"cloudddp list {escape(again)} --before {records[-1].run_id}[/]"
        )


@app.command()
@json_option
def backends(json_: bool) -> None:
    """The registered backends, what each can do, and what it cannot (with the reason)."""
    from .backends import backend_classes

    rows = [
        {
            "name": cls.name,
            "description": cls.description,
            "cloud": cls.cloud,
            "sigterm_grace_s": cls.sigterm_grace,
            **cls.capabilities.to_dict(),
            "enforces_max_cost": cls.spend_while_running,
            **({} if cls.spend_while_running else {"max_cost_not_enforced": cls.no_budget_reason}),
        }
        for cls in backend_classes()
    ]
    if json_:
        _print_json(rows)
        return
    from rich.table import Table

    table = Table("backend", "what it runs on", "cannot", "caveats", show_lines=True)
    for row in rows:
        cannot = [f"{k}: {v}" for k, v in row["unsupported"].items()]
        if "max_cost_not_enforced" in row:
            cannot.append(f"enforce resources.max_cost: {row['max_cost_not_enforced']}")
        table.add_row(
            row["name"],
            row["description"],
            "\n".join(cannot),
            "\n".join(f"{k}: {v}" for k, v in row["caveats"].items()),
        )
    out().print(table)


@app.command()
@click.option("--output", "-O", type=click.Path(path_type=Path, dir_okay=False), help="Write to this file.")
def schema(output: Path | None) -> None:
    """The JSON Schema of job specs, for editors (yaml-language-server: $schema=...)."""
    from .spec import json_schema

    text = json.dumps(json_schema(), indent=2) + "\n"
    if output:
        output.write_text(text)
        err().print(f"wrote {output}")
    else:
        sys.stdout.write(text)


@app.command()
@click.argument("path", type=click.Path(path_type=Path), default=Path("."))
@click.option("--name", default=None, help="Job name (default: the folder's name).")
@click.option("--with-script", is_flag=True, help="Also copy the shared DDP training script into ./src_train.")
@click.option("--force", is_flag=True, help="Overwrite existing files.")
def init(path: Path, name: str | None, with_script: bool, force: bool) -> None:
    """Write a commented job spec (and its JSON Schema for editors) to start from."""
    from .scaffold import init as scaffold

    for written in scaffold(path, name=name, with_script=with_script, force=force):
        click.echo(f"wrote {written}")


def main() -> None:
    import logging

    # The clouds' SDKs log every failed sign-in attempt at length; the error cloudddp prints says what to do.
    logging.getLogger("azure.identity").setLevel(logging.ERROR)
    try:
        app.main(prog_name="cloudddp", standalone_mode=True)
    except CloudDDPError as e:
        _fail(e)
