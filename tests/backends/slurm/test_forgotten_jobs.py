"""A finished run keeps its end once the controller forgets its job (MinJobAge) on a cluster whose
accounting the user cannot read. The batch script records each run's end in the run folder as it exits; status
reads it when neither ``scontrol`` nor ``sacct`` knows the job, and a state this machine saw end is never
downgraded to "unknown". The controller's forgetting is made real by pointing the run's record at a job id this
cluster never had: the real scontrol and sacct then answer exactly as for a purged job."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cloudddp.api import Job, Run
from cloudddp.backends.slurm.script import ENDED_FILE
from cloudddp.backends.status import Cause, RunState
from cloudddp.runs.runner import Runner
from tests.support.cli import FIXTURES, cli
from tests.support.slurm_cluster import SlurmCluster

pytestmark = pytest.mark.slow
TINY = FIXTURES / "tinyjob" / "job.yaml"
NEVER_HAD = "99999999"


def finished(*overrides: str) -> Run:
    on_cluster = [f"slurm.python={sys.executable}", "slurm.kill_wait=5", "slurm.status_every=1"]
    run = Job.load(TINY, [*on_cluster, "code.args=[--epochs, '1']", *overrides]).submit("slurm", poll_seconds=0.2)
    run.wait(timeout=120, poll=0.5)
    return run


def forget(run: Run) -> None:
    """The controller no longer knows the run's job (as after MinJobAge, with no accounting to ask)."""
    run.backend.records.update(run.run_id, info={"job_id": NEVER_HAD})
    run.backend._polls.forget(run.run_id)  # this backend object's cached answer


def test_a_finished_run_stays_succeeded_after_slurm_forgets_it_from_its_end_record(cluster: SlurmCluster) -> None:
    run = finished()
    assert run.status().state is RunState.SUCCEEDED
    forget(run)
    status = run.status()
    assert status.state is RunState.SUCCEEDED, status
    assert status.details["job_id"] == NEVER_HAD and status.ended_at is not None
    record = (Path(status.details["run_dir"]) / ENDED_FILE).read_text()
    assert record.startswith("exit=0 restarts=0 slurm=RUNNING end="), record
    listed = Runner(run.backend).list(run.backend.records)
    assert [s.state for s in listed if s.run_id == run.run_id] == [RunState.SUCCEEDED]


def test_a_failed_run_stays_failed_and_a_seen_end_is_never_downgraded(cluster: SlurmCluster) -> None:
    run = finished("code.args=[--epochs, '2', --fail-rank, '1']", "resources.processes_per_node=2")
    forget(run)
    status = run.status()
    assert status.state is RunState.FAILED and status.cause is Cause.USER_ERROR, status
    (Path(status.details["run_dir"]) / ENDED_FILE).unlink()  # a run folder with no end: the script was killed
    run.backend._polls.forget(run.run_id)
    status = run.status()
    assert status.state is RunState.FAILED, status  # as this machine last saw it, not "unknown"
    assert status.message.startswith("failed when last seen; Slurm no longer knows job"), status.message
    shown = cli("status", run.run_id)
    assert "failed when last seen" in shown.stdout, (shown.stdout, shown.stderr)
