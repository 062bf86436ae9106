"""States that are true: `cloudddp list` shows each run's state now, not the one it had when last looked at."""

from __future__ import annotations

import json
import time

import pytest

from cloudddp.runs import recovery
from cloudddp.runs.database import RunDatabase
from tests.support.cli import FIXTURES, cli
from tests.support.waiting import wait_until

TINY = FIXTURES / "tinyjob" / "job.yaml"


@pytest.mark.slow
def test_a_detached_run_shows_succeeded_in_list_after_it_ends_without_any_status_call() -> None:
    submitted = cli("submit", str(TINY), "--detach", "--quiet", "-o", "code.args=[--epochs, 2, --sleep, 0.2]")
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip().splitlines()[-1]
    assert RunDatabase().get(run_id).state == "pending"  # type: ignore[union-attr]  # as the submit left it

    def listed() -> dict[str, object] | None:
        rows = json.loads(cli("list", "--json").stdout)
        row = next(r for r in rows if r["run_id"] == run_id)
        return row if row["state"] == "succeeded" else None

    row = wait_until(listed, timeout=120, poll=1.0)
    assert row["refreshed"] is True
    assert RunDatabase().get(run_id).state == "succeeded"  # type: ignore[union-attr]  # the record follows

    # Run ids people can type: no id is the latest run (named on stderr), and the random tail finds it too.
    latest = cli("status", "--json")
    assert latest.returncode == 0 and f"latest run: {run_id}" in latest.stderr, latest.stderr
    assert json.loads(latest.stdout)["run_id"] == run_id
    by_tail = cli("status", run_id[-4:], "--json")
    assert by_tail.returncode == 0 and json.loads(by_tail.stdout)["state"] == "succeeded", by_tail.stderr


def test_a_run_whose_backend_cannot_answer_shows_the_state_last_seen_with_when_and_why() -> None:
    registry = RunDatabase()
    registry.add("ghost-20260101-000000-0000", "local", "ghost", "running", {})  # its run folder is gone
    rows = json.loads(cli("list", "--json").stdout)
    (row,) = [r for r in rows if r["run_id"] == "ghost-20260101-000000-0000"]
    assert row["state"] == "running" and row["refreshed"] is False
    assert row["last_seen"] <= time.time() and "ghost-20260101-000000-0000" in row["why_not_refreshed"]
    table = cli("list").stdout
    assert "last seen" in table


def test_a_suffix_shared_by_two_runs_asks_for_more_and_no_runs_says_how_to_start() -> None:
    assert "no runs submitted from this machine yet" in cli("status").stderr
    registry = RunDatabase()
    for run_id in ("a-20260101-000000-ab12", "b-20260101-000001-ab12", "c-20260101-000002-cd34"):
        registry.add(run_id, "local", run_id[0], "succeeded", {})
    assert sorted(r.run_id for r in registry.find("ab12")) == ["a-20260101-000000-ab12", "b-20260101-000001-ab12"]
    assert [r.run_id for r in registry.find("cd34")] == ["c-20260101-000002-cd34"]
    assert [r.run_id for r in registry.find("AB12")] == []  # ids are matched exactly, case included
    ambiguous = cli("status", "ab12")
    assert ambiguous.returncode == 2 and "matches 2 runs" in ambiguous.stderr, ambiguous.stderr


def test_list_pages_with_a_hint_that_repeats_only_the_filters_given() -> None:
    """`list -n 2`'s next-page hint repeats the filters the user gave, and no `--state` they did not."""
    registry = RunDatabase()
    for i in range(3):
        registry.add(f"p-20260101-00000{i}-ab1{i}", "nobackend", "p", "succeeded", {})
    shown = cli("list", "-n", "2")
    assert shown.returncode == 0, shown.stderr
    hint = " ".join(shown.stderr.split())
    assert "2 shown of 3 matching runs; the next page: cloudddp list --limit 2 --before" in hint, hint
    assert "--state" not in hint


def test_run_ids_complete_in_the_shell() -> None:
    """The README's `eval "$(_CLOUDDDP_COMPLETE=bash_source cloudddp)"`: `cloudddp status <TAB>` offers run ids."""
    registry = RunDatabase()
    for run_id in ("digits-20260101-000000-ab12", "digits-20260101-000001-cd34", "cifar-20260101-000002-ef56"):
        registry.add(run_id, "local", run_id.split("-")[0], "succeeded", {})
    for command in ("status", "logs", "metrics", "cancel", "recover"):
        env = {"_CLOUDDDP_COMPLETE": "bash_complete", "COMP_WORDS": f"cloudddp {command} dig", "COMP_CWORD": "2"}
        offered = cli(env=env).stdout.splitlines()
        ids = sorted(line.split(",", 1)[1] for line in offered)
        assert ids == ["digits-20260101-000000-ab12", "digits-20260101-000001-cd34"], (command, offered)


def test_a_recovered_chains_first_attempt_shows_what_became_of_the_chain() -> None:
    """A first attempt that failed and was recovered is listed with the chain's outcome, not as a plain failure;
    the chain's last attempt, which says it itself, and a run without a chain get nothing added."""
    registry = RunDatabase()
    first, second, alone = "r-20260101-000000-aa01", "r-20260101-000001-aa02", "s-20260101-000002-aa03"
    registry.add(first, "nobackend", "r", "failed", {"chain": first, "attempt": 1})
    registry.add(second, "nobackend", "r", "succeeded", {"chain": first, "attempt": 2})
    registry.add(alone, "nobackend", "s", "failed", {})
    attempts = [recovery.Attempt(1, first, 0.0, "failed", "preempted"), recovery.Attempt(2, second, 1.0, "succeeded")]
    chain = recovery.Chain(first, "nobackend", "r", {}, 3, attempts, status=recovery.SUCCEEDED)
    chain.save()
    rows = {r["run_id"]: r for r in json.loads(cli("list", "--json").stdout)}
    assert rows[first]["state"] == "failed" and rows[first]["recovery"] == "recovered: attempt 2 succeeded"
    assert "recovery" not in rows[second] and "recovery" not in rows[alone]
    table = " ".join(cli("list").stdout.split())
    assert "failed → recovered: attempt 2 succeeded" in table, table
    chain.status = recovery.GAVE_UP
    chain.save()
    rows = {r["run_id"]: r for r in json.loads(cli("list", "--json").stdout)}
    assert rows[first]["recovery"] == rows[second]["recovery"] == "not recovered: gave up after attempt 2"
