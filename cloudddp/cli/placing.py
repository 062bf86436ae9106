"""``submit -b auto`` on the command line: the ranking shown before anything is sent, the plan it chose."""

from __future__ import annotations

from cloudddp.api import Job
from cloudddp.cli.confirm import PROXY_MARK, region_mark_words
from cloudddp.errors import UserError
from cloudddp.observe.console import err, escape
from cloudddp.plan import Plan
from cloudddp.runs.placement import Placement
from cloudddp.runs.recovery import Chain
from cloudddp.spec.model import JobSpec


def placed_ranking(spec: JobSpec, *, checks: bool, quiet: bool) -> list[Placement]:
    """``-b auto``'s ranking of ``spec``'s backends (with their preflight checks unless ``checks`` is False),
    printed best first unless ``quiet``."""
    ranking = Job(spec).place(checks=checks)
    if not quiet:
        err().print("[bold]placement[/] (-b auto), best first" + ("" if checks else ", without preflight checks") + ":")
        for number, placement in enumerate(ranking, 1):
            style = "" if placement.usable else "dim"
            err().print(f"  {number}. {escape(placement.line())}", style=style)
        if any(p.mark for p in ranking if p.usable):
            err().print(f"  {escape(PROXY_MARK)}", style="dim")
        for region in sorted({p.region_mark.strip(" ~") for p in ranking if p.usable and p.region_mark}):
            err().print(f"  {escape(region_mark_words(region))}", style="dim")
    return ranking


def first_usable(ranking: list[Placement]) -> str:
    """The backend ``-b auto`` tries first."""
    for placement in ranking:
        if placement.usable:
            return placement.backend
    raise UserError(
        "-b auto found no backend that can take this job:\n  " + "\n  ".join(p.line() for p in ranking),
        hint="fix what each line says, or choose a backend with -b",
    )


def first_plan(ranking: list[Placement]) -> Plan:
    """The plan of the backend ``-b auto`` tries first (its lines start with the ranking)."""
    name = first_usable(ranking)
    plan = next(p.plan for p in ranking if p.backend == name)
    assert plan is not None
    return plan


def placement_moves(chain: Chain) -> str:
    """What the recovery note adds about the backends a chain may move to."""
    if not chain.placements:
        return ""
    words = {"capacity": "a capacity failure", "preempted": "a preemption"}
    after = " or ".join(words.get(cause, cause) for cause in chain.moves_on)
    return f"; after {after} it moves to " + ", then ".join(p["backend"] for p in chain.placements)
