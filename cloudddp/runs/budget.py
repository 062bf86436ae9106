"""The budget watch: stops a run when what it spends reaches ``resources.max_cost``.

The runner's ``launch`` (:mod:`cloudddp.runs.runner`) starts it for a job with a budget on a backend whose bill
reports spend while a run is going (``spend_while_running``: SageMaker and Azure ML here), as a detached process
on the submitting machine — ``python -m cloudddp.runs.budget RUN_ID`` — so it goes on after the CLI exits. Every
``CLOUDDDP_BUDGET_POLL`` seconds (default 60) it reads the run's bill; when the spend so far plus what
stopping still costs (the backend's SIGTERM grace, and the idle time an autoscaling cluster still bills after
the run, on every node) reaches the budget, it cancels the run — a cancel: SIGTERM, the script checkpoints,
then the backend's grace — and records the spend it stopped at in the run record's info (``cloudddp cost``
shows it). It ends by itself when the run ends. Under recovery (:mod:`cloudddp.runs.recovery`) the budget is the
whole job's: what the earlier attempts cost counts, and a stop ends the recovery too.

What it cannot do: watch while this machine is off or asleep, or once the credentials it started with
expire; react faster than one poll; see a price other than the catalog's (for SageMaker the EC2 on-demand
price, a lower bound, so the real spend at the stop is higher).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

from cloudddp.backends.base import Backend
from cloudddp.backends.records import LaunchInfo
from cloudddp.catalog.bill import Bill
from cloudddp.errors import CloudDDPError
from cloudddp.runs.database import RunDatabase
from cloudddp.runs.recovery import cancel as stop_recovering
from cloudddp.runs.recovery import chain_of
from cloudddp.runs.runner import RunnerInfo, budget_poll_seconds, get_backend


def stop_cost(bill: Bill, grace_s: float) -> float:
    """What stopping the run now still costs: the grace period and the bill's pending time, on every node."""
    if bill.price_per_hour is None:
        return 0.0
    return bill.price_per_hour * (grace_s + bill.pending_s) / 3600


def over_budget(bill: Bill, max_cost: float, grace_s: float, spent_before: float = 0.0) -> bool:
    return bill.cost is not None and spent_before + bill.cost + stop_cost(bill, grace_s) >= max_cost


def spent_before(backend: Backend[Any], run_id: str) -> float:
    """What the attempts before ``run_id`` of its recovery chain cost (0 for a run not under recovery)."""
    chain = chain_of(run_id, backend)
    total = 0.0
    for attempt in chain.attempts if chain is not None else []:
        if attempt.run_id == run_id:
            break
        bill = backend.bill(attempt.run_id)
        if bill is not None and bill.cost is not None:
            total += bill.cost
    return total


def _record(backend: Backend[Any], run_id: str, outcome: dict[str, Any]) -> None:
    record = backend.records.get(run_id)
    previous = RunnerInfo.from_fields(record.info).budget if record else {}
    backend.records.update(run_id, info={"budget": {**previous, **outcome}})


def watch(
    backend: Backend[Any],
    run_id: str,
    max_cost: float,
    *,
    poll: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Poll ``run_id``'s bill until the run ends, or cancel it when the budget is reached; what happened."""
    poll = budget_poll_seconds() if poll is None else poll
    while True:
        status = backend.status(run_id)
        if status.state.terminal:
            outcome: dict[str, Any] = {"ended": status.state.value, "at": time.time()}
            break
        bill = backend.bill(run_id)
        before = spent_before(backend, run_id) if bill is not None else 0.0
        if bill is not None and over_budget(bill, max_cost, backend.sigterm_grace, before):
            tail = stop_cost(bill, backend.sigterm_grace)
            chain = chain_of(run_id, backend)
            if chain is not None:  # stopped for the budget: not a fault for recovery to undo
                stop_recovering(chain)
            backend.cancel(run_id)
            spend = before + (bill.cost or 0.0)
            outcome = {
                "stopped_at_cost": round(spend, 4),
                "stop_cost": round(tail, 4),
                "at": time.time(),
                "message": f"stopped: spend ${spend:,.2f}"
                + (f" (${before:,.2f} by earlier attempts)" if before else "")
                + f" + ${tail:,.2f} to stop reached the budget of ${max_cost:,.2f}",
            }
            break
        spent = "no figures yet" if bill is None or bill.cost is None else f"spend ${before + bill.cost:,.2f}"
        print(f"{time.strftime('%H:%M:%S')} {run_id}: {status.state.value}, {spent} of ${max_cost:,.2f}", flush=True)
        sleep(poll)
    _record(backend, run_id, outcome)
    return outcome


def main(argv: list[str]) -> int:
    os.umask(0o077)  # what the watch writes is its user's alone
    run_id = argv[0]
    record = RunDatabase().get(run_id)
    budget = LaunchInfo.from_fields(record.info).max_cost if record else None
    if record is None or budget is None:
        print(f"budget watch: {run_id} has no budget in this machine's run database", flush=True)
        return 2
    backend = get_backend(record.backend)
    try:
        outcome = watch(backend, run_id, budget)
    except CloudDDPError as e:  # credentials gone, the cloud unreachable: say so where `cloudddp cost` looks
        _record(backend, run_id, {"failed": str(e).splitlines()[0], "at": time.time()})
        print(f"budget watch of {run_id} stopped watching: {e}", flush=True)
        return 1
    print(f"budget watch of {run_id}: {outcome}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
