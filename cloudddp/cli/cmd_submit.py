"""Launching a job: ``submit`` (then following the run until it ends) and ``doctor`` (the checks before)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from cloudddp.api import Job, Run
from cloudddp.backends.checks import Check, PreflightFailed
from cloudddp.backends.commands import json_option, load_job, override_option
from cloudddp.backends.plugins import backend_class
from cloudddp.backends.status import LogLine, RunStatus
from cloudddp.catalog.sizing import script_arg
from cloudddp.cli.confirm import question
from cloudddp.cli.options import (
    backend_option,
    format_record,
    job_argument,
    plan_notes,
    print_plan,
    sdk_log,
)
from cloudddp.cli.placing import first_plan, first_usable, placed_ranking, placement_moves
from cloudddp.errors import Declined, RunFailed
from cloudddp.observe.console import Progress, err, escape, line_tag, note, out, print_json, printable
from cloudddp.observe.live import EpochProgress
from cloudddp.observe.metrics import MetricRecord
from cloudddp.observe.sdklog import divert, diverted_to
from cloudddp.runs.placement import AUTO
from cloudddp.runs.recovery import Chain
from cloudddp.runs.runner import get_backend
from cloudddp.spec.model import JobSpec


@click.command()
@job_argument
@backend_option()
@override_option
@click.option("--dry-run", is_flag=True, help="Render only; send nothing.")
@click.option("--detach", "-d", is_flag=True, help="Return after launching.")
@json_option
@click.option("--quiet", "-q", is_flag=True, help="Print only the run id.")
@click.option("--no-provision", is_flag=True, help="Leave clusters alone (backends that create or resize them).")
@click.option("--skip-checks", is_flag=True, help="Launch even when preflight checks fail.")
@click.option(
    "--yes",
    "-y",
    is_flag=True,
    help="Launch on a cloud without asking (the cost is still shown); needed for a paid launch where nobody can "
    "answer (--quiet, --json, a pipe, no terminal).",
)
@click.option(
    "--all-ranks",
    is_flag=True,
    help="Show every process's output while following, and the runtime's lines (default: global rank 0's).",
)
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    help="Show everything: every rank's and the runtime's lines, and the cloud SDKs' own messages (default: "
    "those go to a log file, named at the end).",
)
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
@click.option(
    "--resume-from",
    "resume_from",
    metavar="RUN",
    default=None,
    help="Carry RUN's latest checkpoint (from whichever backend it ran on) into this job's checkpoint folder "
    "first, so the script resumes from it.",
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
    yes: bool,
    all_ranks: bool,
    verbose: bool,
    recover: int | None,
    resume_from: str | None,
) -> None:
    """Render the job and launch it; follow its metrics until it ends unless --detach.

    \b
    Examples:
      cloudddp submit job.yaml                         # torchrun here
      cloudddp submit job.yaml -b sagemaker --dry-run  # the request, not sent
      cloudddp submit job.yaml -o resources.nodes=2 --detach
      cloudddp submit job.yaml -b azureml -y           # no question before the launch
      cloudddp submit job.yaml -b auto                 # the cheapest backend that can start it (docs/placement.md)
      cloudddp submit job.yaml -b slurm --resume-from RUN   # go on from another run's checkpoint

    On a cloud, the size, its price per hour and the job's estimated cost come first; then submit asks
    Proceed? [Y/n]. Nothing paid is launched without a yes: with --quiet, --json, a pipe or no terminal, a cloud
    submit needs -y (--yes), or it is refused with exit 2 and nothing is sent.
    """
    spec = load_job(job, override)
    ranking = (
        placed_ranking(spec, checks=not (skip_checks or dry_run), quiet=quiet or json_) if backend == AUTO else None
    )
    if dry_run:
        print_plan(first_plan(ranking) if ranking else backend_class(backend)().render(spec), json_=json_)
        return
    if ranking:
        first_usable(ranking)  # none takes the job: said before anything is asked
    if not verbose:
        divert(sdk_log())
    try:
        run = Job(spec).submit(
            backend,
            checks=not skip_checks,
            provision=not no_provision,
            recover=recover,
            progress=None if (quiet or json_) else Progress(plan_notes),
            resume_from=resume_from,
            ranking=ranking,
            confirm=question(spec, yes=yes, quiet=quiet or json_),
        )
    except PreflightFailed as e:
        print_checks(e.checks)
        err().print("[bold red]error:[/] preflight checks failed; fix them or pass --skip-checks")
        sys.exit(e.exit_code)
    except Declined as e:
        err().print(escape(str(e)))
        sys.exit(e.exit_code)
    chain, backend = run.chain, run.backend.name
    if chain is not None and not (quiet or json_):
        note(recovery_note(chain))
    if json_ and detach:
        print_json({"run_id": run.run_id, "backend": backend})
    elif quiet:
        out().print(run.run_id)
    elif not json_:
        err().print(f"[bold]submitted[/] {run.run_id} ({backend})")
    if detach:
        name_sdk_log(quiet=quiet or json_)
        return
    try:
        follow_run(run, quiet=quiet or json_, epochs=epochs_of(spec), all_ranks=all_ranks or verbose, json_=json_)
    finally:
        name_sdk_log(quiet=quiet or json_)


def recovery_note(chain: Chain) -> str:
    """What the recovery a submit started will do, in one line."""
    moves = f"; after {chain.capacity_tries} capacity failure(s) on a size it moves to " + ", then ".join(
        f["size"] for f in chain.fallbacks
    )
    return (
        f"recovery: up to {chain.max_recoveries} resubmissions after preemption or infrastructure faults, by a "
        "watcher that outlives this terminal" + (moves if chain.fallbacks else "") + placement_moves(chain)
    )


def name_sdk_log(*, quiet: bool) -> None:
    """Say once where the SDKs' own messages went, when any did."""
    path = diverted_to()
    if path is not None and not quiet:
        note(f"the cloud SDKs' own messages are in {path} (--verbose shows them here)")


def epochs_of(spec: JobSpec) -> int | None:
    value = script_arg(list(spec.code.args), "--epochs")
    return int(value) if value and value.isdigit() else None


def event_text(event: MetricRecord | LogLine) -> str:
    """A metric record in cyan; a log line as the script printed it, with where it came from (a line from
    outside the program marked so)."""
    if isinstance(event, MetricRecord):
        return f"[cyan]{escape(format_record(event))}[/]"
    return f"[dim]\\[{escape(printable(line_tag(event)))}][/] {escape(printable(event.text))}"


def echoed(event: MetricRecord | LogLine) -> bool:
    """A record whose line was just shown as printed: shown once, as the script's own line."""
    return isinstance(event, MetricRecord) and event.echoed


def follow_run(
    run: Run, *, quiet: bool, epochs: int | None = None, all_ranks: bool = False, json_: bool = False
) -> None:
    """Print what the run reports as it arrives: metric records, and the script's own output (rank 0's
    unless ``all_ranks``); on a terminal, above a bar of the epochs reached (of the script's ``--epochs`` when it
    has one) with the elapsed time. With ``json_``, one JSON document at the end: the run's final status."""
    try:
        if quiet:
            for _ in run.metrics(follow=True):
                pass
        elif sys.stderr.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            progress = EpochProgress()
            with Bar(TextColumn("epoch"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err()) as bar:
                task = bar.add_task("epochs", total=epochs)  # no total: a count of the epochs reached
                for event in run.events(follow=True, all_ranks=all_ranks):
                    if not echoed(event):
                        bar.console.print(event_text(event))
                    reached = progress.update(event) if isinstance(event, MetricRecord) else None
                    if reached is not None:
                        bar.update(task, completed=reached)
        else:
            for event in run.events(follow=True, all_ranks=all_ranks):
                if not echoed(event):
                    out().print(event_text(event))
        status = run.wait(poll=0.2)
    except KeyboardInterrupt:
        err().print(
            f"\ndetached; the run goes on. Follow it: cloudddp metrics {run.run_id} -f   "
            f"stop it: cloudddp cancel {run.run_id}"
        )
        sys.exit(130)
    if json_:
        print_json(status.to_dict())
    print_end(status, quiet=quiet)
    if status.state.value == "failed":
        sys.exit(RunFailed.exit_code)


def print_end(status: RunStatus, *, quiet: bool) -> None:
    colour = {"succeeded": "green", "failed": "red", "cancelled": "yellow"}.get(status.state.value, "white")
    if quiet:
        return
    err().print(f"[bold {colour}]{status.state.value}[/] {status.run_id}: {escape(printable(status.message))}")
    failure = status.details.get("failure")
    if failure and failure.get("log_tail"):
        stalled = "stalled_ranks" in failure  # the stacks of the quiet ranks, each with its heading
        err().print("[dim]" + ("where the quiet ranks are:" if stalled else "last lines of the failed rank:") + "[/]")
        for line in failure["log_tail"][-20 if stalled else -10 :]:
            err().print(f"  {escape(printable(line))}")  # the job's own output


@click.command()
@job_argument
@backend_option()
@override_option
@json_option
def doctor(job: Path, backend: str, override: tuple[str, ...], json_: bool) -> None:
    """Check before launching: the plan's own checks, then credentials, quota, sizes and data at the target.

    \b
    Example:
      cloudddp doctor job.yaml -b azureml
    """
    impl = get_backend(backend)
    plan = impl.render(load_job(job, override))
    checks = impl.preflight(plan)
    if json_:
        print_json({"warnings": plan.warnings, "checks": [c.to_dict() for c in checks]})
    else:
        plan_notes(plan)
        print_checks(checks)
    if any(c.ok is False for c in checks):
        sys.exit(2)


def print_checks(checks: list[Check]) -> None:
    for c in checks:
        mark = {True: "[green]✓[/]", False: "[red]✗[/]", None: "[yellow]?[/]"}[c.ok]
        out().print(f"{mark} {escape(c.name)}" + (f" [dim]— {escape(c.detail)}[/]" if c.detail else ""))
        if c.ok is False and c.fix:
            out().print(f"    [bold]fix:[/] {escape(c.fix)}")
