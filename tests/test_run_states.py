"""States that are true: `cloudddp list` shows each run's state now, not the one it had when last looked at."""

from __future__ import annotations

import json
import time

import pytest

from cloudddp.runs.registry import Registry

from .support.cli import FIXTURES, cli
from .support.waiting import wait_until

TINY = FIXTURES / "tinyjob" / "job.yaml"


@pytest.mark.slow
def test_a_detached_run_shows_succeeded_in_list_after_it_ends_without_any_status_call() -> None:
    submitted = cli("submit", str(TINY), "--detach", "--quiet", "-o", "code.args=[--epochs, 2, --sleep, 0.2]")
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip().splitlines()[-1]
    assert Registry().get(run_id).state == "pending"  # type: ignore[union-attr]  # as the submit left it

    def listed() -> dict[str, object] | None:
        rows = json.loads(cli("list", "--json").stdout)
        row = next(r for r in rows if r["run_id"] == run_id)
        return row if row["state"] == "succeeded" else None

    row = wait_until(listed, timeout=120, poll=1.0)
    assert row["refreshed"] is True
    assert Registry().get(run_id).state == "succeeded"  # type: ignore[union-attr]  # the record follows


def test_a_run_whose_backend_cannot_answer_shows_the_state_last_seen_with_when_and_why() -> None:
    registry = Registry()
    registry.add("ghost-20260101-000000-0000", "local", "ghost", "running", {})  # its run folder is gone
    rows = json.loads(cli("list", "--json").stdout)
    (row,) = [r for r in rows if r["run_id"] == "ghost-20260101-000000-0000"]
    assert row["state"] == "running" and row["refreshed"] is False
    assert row["last_seen"] <= time.time() and "ghost-20260101-000000-0000" in row["why_not_refreshed"]
    table = cli("list").stdout
    assert "last seen" in table
