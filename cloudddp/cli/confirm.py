"""What a cloud launch will cost, said before it happens (``plan`` and ``submit``), and the question ``submit``
asks on a terminal: the chosen size, its price per hour for all nodes, and the estimate of the whole job, or,
for a script whose speed cannot be modelled, the most ``limits.max_runtime`` lets it cost.

Nothing paid is launched without a yes: a person's answer at a terminal, or ``--yes``. Where nobody can answer
(``--quiet``, ``--json``, a pipe, no terminal), a paid launch without ``--yes`` is refused with exit 2, nothing sent
(a launch that rents no priced size, local or Slurm, is never asked about)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass

import click

from cloudddp.cli.options import money
from cloudddp.errors import UserError
from cloudddp.observe.console import err, escape
from cloudddp.plan import Plan
from cloudddp.spec.model import JobSpec

PROXY_MARK = (
    "* = the EC2 on-demand price of the same instance (us-east-1), a lower bound: SageMaker bills ml.* instances "
    "at a higher rate"
)
HOW_TO_ESTIMATE = (
    "for an estimate give resources.step_time (seconds per optimizer step) and resources.steps, or run the job "
    "once: its measured step time is used on the same size"
)


@dataclass(frozen=True)
class Cost:
    """The price side of a launch: what is shown before it and what ``submit`` asks about."""

    size: str
    nodes: int
    price_per_hour: float | None  # for all nodes
    proxy: bool  # an EC2 price standing in for SageMaker's
    estimate: float | None
    job_s: float | None
    ceiling: float | None  # price × limits.max_runtime, when there is no estimate
    max_runtime_s: float
    price_region: str | None = None  # the region whose price it is, when the catalog has none where the job runs

    def lines(self) -> list[str]:
        mark = "*" if self.proxy else ""
        where = f" ~{self.price_region}" if self.price_region else ""
        per_hour = f"{money(self.price_per_hour)}{mark}/h{where}" if self.price_per_hour else "unknown/h"
        lines = [f"size: {self.nodes} × {self.size}, {per_hour} for all nodes"]
        if self.estimate is not None:
            took = f" (about {_duration(self.job_s)} from submit to end)" if self.job_s else ""
            lines.append(f"estimate: {money(self.estimate)}{mark}{where} for the whole job{took}")
        elif self.ceiling is not None:
            lines.append(
                f"at most {money(self.ceiling)}{mark}{where}: limits.max_runtime {_duration(self.max_runtime_s)} at "
                f"{per_hour} (no estimate: {HOW_TO_ESTIMATE})"
            )
        else:
            lines.append("cost unknown: the catalog has no dated price for this size")
        if self.proxy:
            lines.append(PROXY_MARK)
        if self.price_region:
            lines.append(region_mark_words(self.price_region))
        return lines


def region_mark_words(region: str) -> str:
    """What ``~REGION`` beside a figure means."""
    return (
        f"~{region} = the catalog has no price for the size where the job runs: the price is {region}'s, the region "
        "that lists it (prices differ between regions)"
    )


def _duration(seconds: float | None) -> str:
    s = seconds or 0.0
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def cost_of(plan: Plan, max_runtime_s: float) -> Cost | None:
    """What launching ``plan`` costs, from its estimate; None for a plan that rents no priced size (local, Slurm, a
    size without a dated price)."""
    est = plan.estimate
    if est is None or est.size is None:
        return None
    price = est.price_per_hour
    return Cost(
        size=est.size,
        nodes=est.nodes or 1,
        price_per_hour=price,
        proxy=est.price_kind == "ec2-proxy",
        price_region=est.price_region,
        estimate=est.total_cost,
        job_s=est.job_s,
        ceiling=price * max_runtime_s / 3600 if price is not None and est.total_cost is None else None,
        max_runtime_s=max_runtime_s,
    )


def interactive() -> bool:
    """A person at a terminal who can answer (not a pipe, a script or CI)."""
    return sys.stdin.isatty() and sys.stderr.isatty()


def question(spec: JobSpec, *, yes: bool, quiet: bool) -> Callable[[Plan], bool]:
    """What ``submit`` asks before a launch: each paid plan's cost is shown (unless ``quiet``), and a person answers
    unless ``yes``; a paid launch nobody can answer is refused (:func:`confirm_launch`)."""
    max_runtime = float(spec.limits.max_runtime)
    return functools.partial(confirm_launch, max_runtime_s=max_runtime, yes=yes, quiet=quiet)


def confirm_launch(plan: Plan, max_runtime_s: float, *, yes: bool, quiet: bool = False) -> bool:
    """Show what launching ``plan`` will cost; unless ``yes``, wait for ``Proceed? [Y/n]`` (False on no). A paid
    launch without ``yes`` where nobody can answer (``quiet``, or no terminal) raises a UserError: nothing sent."""
    cost = cost_of(plan, max_runtime_s)
    if cost is None:
        return True
    if not quiet:
        for line in cost.lines():
            err().print(f"[bold]•[/] {escape(line)}")
    if yes:
        return True
    if quiet or not interactive():
        raise UserError(
            f"not submitted: {plan.backend} would rent {cost.nodes} × {cost.size} (paid compute) and nobody can "
            "answer Proceed? here (--quiet, --json, a pipe or no terminal); nothing was sent",
            hint="pass -y (--yes) to launch it without a question, or submit from a terminal to be asked",
        )
    return click.confirm("Proceed?", default=True, err=True)
