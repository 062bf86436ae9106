"""``cloudddp stacks``: every rank's Python stacks of a running run, grouped, the rank that stands out first."""

from __future__ import annotations

import time

import click

from cloudddp.backends.commands import json_option
from cloudddp.cli.cmd_runs import attach, quiet_sdks, run_arguments
from cloudddp.injob.culprit import TAG, Capture, render
from cloudddp.observe.console import escape, out, print_json


@click.command()
@run_arguments
@quiet_sdks
@click.option("--all-threads", is_flag=True, help="Every thread of each rank, not only its main thread.")
@json_option
def stacks(run: str | None, backend: str | None, all_threads: bool, json_: bool) -> None:
    """Every rank's Python stacks now, each rank once: ranks with the same stack shown once, the odd ones out first.

    The run goes on: each rank is asked once (py-spy where it may attach, else a signal on which the rank writes
    its stacks to the log, read back from there), nothing is stopped, no checkpoint is touched. On SageMaker and Azure
    ML the request goes through the run's storage and one process per node answers within its 10 s poll, through the
    log (up to 45-60 s in all).

    \b
    Examples:
      cloudddp stacks                  # the latest run
      cloudddp stacks 6c6a --all-threads
    """
    handle = attach(run, backend)
    started = time.monotonic()
    found = handle.stacks()
    seconds = time.monotonic() - started
    if json_:
        print_json({"run": handle.run_id, "seconds": round(seconds, 2), **found.to_dict()})
        return
    console = out()
    for line in lines(found, seconds, all_threads=all_threads):
        console.print(escape(line))


def lines(found: Capture, seconds: float, *, all_threads: bool) -> list[str]:
    """What ``cloudddp stacks`` prints: how many ranks answered, who stands out, the grouped stacks, the ranks that
    gave none."""
    world = found.world or len(found.stacks) + len(found.missing)
    head = [f"{len(found.stacks)} of {world} ranks gave their stacks in {seconds:.1f} s; the run goes on"]
    verdict = found.verdict()
    if verdict is not None:
        head.append("stands out: " + verdict.line()[len(TAG) :].strip())
    gone = [f"rank {rank}: no stack: {why}" for rank, why in sorted(found.missing.items())]
    unheard = sorted(set(range(found.world)) - {r.rank for r in found.stacks} - set(found.missing))
    gone += [f"rank {rank}: no stack: no process of it on the run's machines" for rank in unheard]
    return head + render(found.stacks, all_threads=all_threads) + gone
