"""A cancelled local run's record says what happened: the exit codes the stop caused are named as the stop's in its
message, and none is recorded as if the run had failed."""

from __future__ import annotations

from pathlib import Path

from cloudddp.backends.local.outcome import conclude
from cloudddp.backends.local.rundir import RunDir
from cloudddp.backends.status import Cause, RunState


def test_a_cancel_records_no_failing_exit_code_and_says_whose_they_are(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "job-20250101-000000-abcd")
    run.path.mkdir()
    ending = conclude(run, [1, 0], "cancelled")
    assert ending.state is RunState.CANCELLED and ending.cause is Cause.CANCELLED
    assert ending.message == "cancelled on request (exit code 1 from the stop)"
    details = run.write_status(state=ending.state.value, message=ending.message, **ending.changes()).details()
    assert details == {"exit_codes": []}  # `status` shows no exit_codes row: nothing failed


def test_a_cancel_whose_nodes_exited_cleanly_says_only_that_it_was_cancelled(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "job-20250101-000000-abcd")
    run.path.mkdir()
    ending = conclude(run, [0, 0], "cancelled")
    assert ending.message == "cancelled on request" and ending.changes() == {"exit_codes": [], "cause": "cancelled"}
