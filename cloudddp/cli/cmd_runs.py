"""Looking after runs: ``status``, ``cost``, ``recover``, ``logs``, ``metrics``, ``cancel`` and ``list``."""

from __future__ import annotations

import itertools
import json
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from click.shell_completion import CompletionItem

from cloudddp.api import Run
from cloudddp.backends.commands import json_option
from cloudddp.backends.plugins import load_spec
from cloudddp.backends.status import LogLine
from cloudddp.cli.options import (
    backend_option,
    follow_option,
    format_record,
    money,
    sdk_log,
)
from cloudddp.errors import UserError
from cloudddp.observe.console import err, escape, line_tag, out, print_json, printable
from cloudddp.observe.live import follow_table
from cloudddp.observe.plotting import plot_metrics
from cloudddp.observe.sdklog import divert
from cloudddp.runs import recovery
from cloudddp.runs.chained import chain_outcome
from cloudddp.runs.cost import CostReport
from cloudddp.runs.database import RunDatabase
from cloudddp.runs.runner import current_states


def when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else ""


F = TypeVar("F", bound=Callable[..., Any])


def quiet_sdks(f: F) -> F:
    """``--verbose``: the cloud SDKs' own messages on the terminal; without it they go quietly to :func:`sdk_log`."""
    return click.option(
        "--verbose",
        "-v",
        is_flag=True,
        expose_value=False,
        callback=lambda _ctx, _param, verbose: None if verbose else divert(sdk_log()),
        help="Show the cloud SDKs' own messages here (default: they go to $CLOUDDDP_HOME/logs/sdk.log).",
    )(f)


def attach(run: str | None, backend: str | None) -> Run:
    """The run RUN names (an id, or a unique prefix or suffix of one); without RUN the latest run submitted from
    this machine, named on stderr so the output says which run it is about."""
    if run is None:
        latest = RunDatabase().latest()
        if latest is None:
            raise UserError("no runs submitted from this machine yet", hint="cloudddp submit job.yaml")
        err().print(f"[dim]latest run: {latest.run_id} ({latest.backend})[/]")
        run = latest.run_id
    return Run.attach(run, backend)


def run_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of ``RUN``: the ids of this machine's runs that start with what is typed, newest first."""
    return [CompletionItem(r.run_id, help=f"{r.backend}, {r.state}") for r in RunDatabase().find(incomplete)][:200]


def run_arguments(f: F) -> F:
    """``RUN`` (an id, a unique prefix or suffix of one; the latest run when left out) and ``--backend``."""
    f = backend_option(None, "Look the run up at this backend (runs started elsewhere).")(f)
    return click.argument("run", required=False, shell_complete=run_ids)(f)


@click.command()
@run_arguments
@quiet_sdks
@json_option
def status(run: str | None, backend: str | None, json_: bool) -> None:
    """Show a run's state; for a failed run, which rank failed, why, and the tail of its log.

    \b
    Examples:
      cloudddp status                  # the latest run
      cloudddp status 6c6a --json      # a run by any unique part of its id
    """
    st = attach(run, backend).status()
    if json_:
        print_json(st.to_dict())
        return
    from rich.table import Table

    table = Table(show_header=False, box=None)
    for key, value in (
        ("run", st.run_id),
        ("backend", st.backend),
        ("state", st.state.value),
        ("message", st.message),
        ("cause", st.cause.value if st.cause else ""),
        ("created", when(st.created_at)),
        ("ended", when(st.ended_at)),
    ):
        if value:
            table.add_row(f"[bold]{key}[/]", escape(str(value)))
    for key, value in st.details.items():
        if key not in ("failure", "attempts") and value not in (None, "", [], {}):  # a cancel records no exit code
            table.add_row(f"[bold]{key}[/]", escape(str(value)))
    out().print(table)
    if st.details.get("attempts"):
        attempts = Table("attempt", "backend", "run", "started", "state", "cause", "why", title="attempts")
        for a in st.details["attempts"]:
            attempts.add_row(
                str(a["number"]),
                a.get("backend") or st.backend,
                a["run_id"],
                when(a["started"]),
                a["state"],
                a["cause"] or "",
                escape(a["reason"] or ""),
            )
        out().print(attempts)
        for a in st.details["attempts"]:
            if a.get("note"):
                out().print(f"attempt {a['number']}: {escape(a['note'])}")
    failure = st.details.get("failure")
    if failure:
        out().print("[bold red]failure[/]")
        for k, v in failure.items():
            if k != "log_tail":
                out().print(f"  {k}: {v}")
        for line in failure.get("log_tail", [])[-20:]:
            out().print(f"  | {escape(printable(line))}")  # the job's own output


@click.command()
@run_arguments
@quiet_sdks
@json_option
def cost(run: str | None, backend: str | None, json_: bool) -> None:
    """What a run cost (so far, while it goes) next to what was estimated at submit, each figure with its source.

    \b
    Examples:
      cloudddp cost
      cloudddp cost 6c6a --json
    """
    report = attach(run, backend).cost()
    if json_:
        print_json(report.to_dict())
        return
    out().print(cost_text(report))


def seconds(v: Any) -> str:
    if not isinstance(v, (int, float)):
        return ""
    return f"{v:,.0f} s" if v < 7200 else f"{v / 3600:,.2f} h"


def cost_text(report: CostReport) -> Any:
    """The report as a table of estimate vs actual, then where each actual figure came from."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    est, bill = report.estimate, report.bill
    head = Text.from_markup(f"[bold]{escape(report.run_id)}[/] ({report.backend}, {report.state})")
    table = Table("", "estimate at submit", "actual" + ("" if bill is None or bill.final else " so far"), box=None)
    priced = bill is not None and bill.price_per_hour is not None
    price = est.price_per_hour if est else None
    where = est.region_mark if est else ""  # a price read in another region than the job's
    actual = money(report.actual_cost) if report.actual_cost is not None else ""
    if report.attempts:
        actual += f" over {len(report.attempts)} attempts"
    if report.difference is not None:
        actual += f" ({report.difference:+.0%})"
    rows = [
        ("on", "", f"{bill.size} × {bill.nodes}" if bill else ""),
        ("training (est.) / processes ran", seconds(est and est.training_s), seconds(bill.ran_s) if bill else ""),
        ("billed per node", seconds(est and est.billed_s), seconds(bill.billed_s) if bill and priced else ""),
        ("still to be billed per node", "", seconds(bill.pending_s) if bill and bill.pending_s else ""),
        (
            "price, all nodes",
            f"{money(price)}/h{where}" if price is not None else "",
            f"{money(bill.price_per_hour)}/h" if bill and bill.price_per_hour is not None else "",
        ),
        ("[bold]cost[/]", money(report.estimated_cost) + where if report.estimated_cost is not None else "", actual),
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
        where = f"{attempt['backend']}, " if attempt.get("backend") else ""
        parts.append(Text(f"attempt {attempt['run_id']} ({where}{attempt['state']}): {money(attempt['cost'])}"))
    if bill is not None:
        title = "[dim]the actual figures" + (" of the current attempt" if report.attempts else "") + "[/]"
        sources = Table("figure", "value", "where it comes from", box=None, title_justify="left", title=title)
        for f in bill.figures:
            value = "?" if f.value is None else f"{f.value:,}" if isinstance(f.value, (int, float)) else str(f.value)
            sources.add_row(f.name, f"{value} {f.unit}".strip(), escape(f.source))
        parts.append(sources)
        parts += [Text(f"not in these figures: {n}", style="dim") for n in bill.notes]
    if est and est.step_basis:
        basis = "the cost model's" if est.step_basis == "model" else est.step_basis
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
        parts.append(Text(f"budget {money(report.max_cost)}: {what}"))
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


@click.command()
@click.argument("run", required=False, shell_complete=run_ids)
@click.option(
    "--spec",
    "spec_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The job's spec file, to give a restarted watcher the secrets the spec holds as literals "
    "(they are never stored).",
)
def recover(run: str | None, spec_file: Path | None) -> None:
    """Pick up recovery where it stopped: start the watcher again for RUN (or for every run still under
    recovery whose watcher is gone, e.g. after this machine restarted).

    \b
    Examples:
      cloudddp recover                 # every chain whose watcher is gone
      cloudddp recover 6c6a --spec job.yaml
    """
    if run is not None:
        chains = [c for c in [Run.attach(run).chain] if c is not None]
        if not chains:
            raise UserError(f"{run} was not submitted with recovery", hint="submit it with --recover")
    else:
        chains = recovery.every_chain()
    literals = _literal_secrets(spec_file) if spec_file is not None else {}
    for chain in chains:
        restarted = recovery.ensure_watched(chain, literals)
        what = (
            "watcher started again" if restarted else ("watched" if chain.status == recovery.WATCHING else chain.status)
        )
        err().print(f"{chain.chain_id}: attempt {chain.current.number}, {what}")
        if chain.status == recovery.NEEDS_SECRETS:
            err().print(f"  {escape(chain.message)}")


def _literal_secrets(spec_file: Path) -> dict[str, str]:
    """The secret values ``spec_file`` gives as literals, by variable name."""
    spec = load_spec(spec_file)
    return {name: e.value for name, e in spec.env.items() if e.secret and e.from_env is None and e.value is not None}


@click.command()
@run_arguments
@quiet_sdks
@follow_option
@json_option
@click.option(
    "--tail", "-n", "tail", type=click.IntRange(min=1), default=None, help="Only the last N lines (then follow)."
)
def logs(run: str | None, follow: bool, backend: str | None, json_: bool, tail: int | None) -> None:
    """Print a run's logs, each line prefixed by the rank or host it came from.

    \b
    Examples:
      cloudddp logs --tail 20          # the latest run's last lines
      cloudddp logs 6c6a -f            # follow until the run ends
    """
    handle = attach(run, backend)
    try:
        if tail is None:
            for line in handle.logs(follow=follow):
                print_log_line(line, json_=json_)
            return
        so_far = list(handle.logs(follow=False))
        for line in so_far[-tail:]:
            print_log_line(line, json_=json_)
        if follow:  # then what comes after: following starts from the first line, so those already read are skipped
            for line in itertools.islice(handle.logs(follow=True), len(so_far), None):
                print_log_line(line, json_=json_)
    except KeyboardInterrupt:
        sys.exit(130)


def print_log_line(line: LogLine, *, json_: bool) -> None:
    if json_:
        document = {"source": line.source, "rank": line.rank, "text": line.text, "time": line.time}
        sys.stdout.write(json.dumps(document) + "\n")
    else:
        tag, text = printable(line_tag(line)), printable(line.text)
        sys.stdout.write(f"[{tag}] {text}\n" if tag else f"{text}\n")
    sys.stdout.flush()


@click.command()
@run_arguments
@quiet_sdks
@follow_option
@json_option
@click.option(
    "--plot",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write a PNG chart of every metric over steps (needs matplotlib).",
)
def metrics(run: str | None, follow: bool, backend: str | None, json_: bool, plot: Path | None) -> None:
    """Print a run's metrics (from the training script's metric lines); a live table with -f on a terminal.

    \b
    Examples:
      cloudddp metrics -f
      cloudddp metrics 6c6a --plot metrics.png
      cloudddp metrics --json | jq .loss
    """
    handle = attach(run, backend)
    if plot is not None:
        plot_metrics(
            list(handle.metrics(follow=follow)), title=f"{handle.run_id} ({handle.status().state.value})", path=plot
        )
        err().print(f"wrote {plot}")
        return
    try:
        if follow and not json_ and sys.stdout.isatty():
            follow_table(handle.metrics(follow=True), lambda: handle.status().state.value, handle.run_id)
            return
        shown = 0
        for record in handle.metrics(follow=follow):
            shown += 1
            if json_:
                sys.stdout.write(json.dumps(record.to_dict()) + "\n")
            else:
                out().print(escape(format_record(record)))
            sys.stdout.flush()
    except KeyboardInterrupt:
        sys.exit(130)
    if not shown:
        err().print(escape(no_metrics(handle.run_id, handle.status().state.value)))


def no_metrics(run_id: str, state: str) -> str:
    """Why a run shows no metrics, and what gives it some."""
    yet = " yet" if state in ("pending", "starting", "running") else ""
    return (
        f"{run_id} ({state}) has no metrics{yet}: "
        "cloudddp reads global rank 0's output for `CLOUDDDP_METRIC {json}` lines, the lines the job's declared "
        "`metrics:` regexes match, and a Hugging Face Trainer's printed log records; in the job it turns Lightning "
        "CSVLogger files (metrics.csv) and TensorBoard event files under the working folder or the "
        "CLOUDDDP_*_DIR folders into such lines. To get metrics: print CLOUDDDP_METRIC lines "
        "(src_train/ddptrain/metrics.py has an `emit` to copy), declare a regex per metric under `metrics:` in the "
        "job's spec, or log with Lightning's CSVLogger (TensorBoard files need `tensorboard` installed in the job). "
        "See docs/metrics-and-logs.md."
    )


@click.command()
@run_arguments
@quiet_sdks
def cancel(run: str | None, backend: str | None) -> None:
    """Stop a run: the training script checkpoints, then every process of the run ends.

    \b
    Examples:
      cloudddp cancel                  # the latest run
      cloudddp cancel 6c6a
    """
    handle = attach(run, backend)
    requested = handle.cancel()
    st = handle.status()
    if requested:
        err().print(f"{st.run_id}: {st.state.value}")
    else:
        err().print(f"{st.run_id} had already ended ({st.state.value}): nothing to cancel")


@click.command("list")
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
    """Runs submitted from this machine, newest first, a page at a time. The state of a run that had not ended is
    asked of its backend now; when it cannot be asked, the state last seen is shown with when and why.

    \b
    Examples:
      cloudddp list
      cloudddp list -b sagemaker --json
    """
    database = RunDatabase()
    after = None
    if before is not None:
        found = database.named(before)
        if len(found) != 1:
            raise UserError(
                f"--before {before}: "
                + (
                    "no such run in this machine's run database"
                    if not found
                    else f"matches {len(found)} runs; give more of the id"
                )
            )
        after = found[0]
    records = database.list(backend=backend, limit=limit + 1 if limit else None, state=state, name=name, before=after)
    more = bool(limit) and len(records) > limit
    records = records[:limit] if limit else records
    seen = current_states(records)  # a run that had not ended is asked of its backend now
    chains: dict[str, recovery.Chain | None] = {}
    outcomes = {s.record.run_id: chain_outcome(s.record.info, chains) for s in seen}
    if json_:
        print_json(
            [
                {
                    "run_id": s.record.run_id,
                    "backend": s.record.backend,
                    "name": s.record.name,
                    "state": s.state,
                    "created_at": s.record.created_at,
                    "refreshed": s.refreshed,
                    **({"recovery": outcomes[s.record.run_id]} if outcomes[s.record.run_id] else {}),
                    **({} if s.refreshed else {"last_seen": s.record.updated_at, "why_not_refreshed": s.reason}),
                }
                for s in seen
            ]
        )
        return
    from rich.table import Table

    table = Table("run", "backend", "state", "created")
    for s in seen:
        shown = (  # not `state`: that is the --state filter the paging hint repeats
            s.state if s.refreshed else f"{s.state} [dim](last seen {when(s.record.updated_at)}: {escape(s.reason)})[/]"
        )
        outcome = outcomes[s.record.run_id]
        shown += f" → {escape(outcome)}" if outcome else ""
        table.add_row(s.record.run_id, s.record.backend, shown, when(s.record.created_at))
    out().print(table)
    if more:
        total = database.count(backend=backend, state=state, name=name)
        again = " ".join(
            f"{flag} {shlex.quote(str(value))}"
            for flag, value in (("--backend", backend), ("--state", state), ("--name", name), ("--limit", limit))
            if value
        )
        err().print(
            f"[dim]{len(records)} shown of {total:,} matching runs; the next page: "
            f"cloudddp list {escape(again)} --before {records[-1].run_id}[/]"
        )
