"""On the real cluster (tests/support/slurm_cluster.py): a requeued run numbers its job steps
from 0 again, so a step signal slurmctld still delivers for an earlier run's training (observed: a SIGTERM that
timed out on a node during a preemption, retried about 60 s later) would reach the new run's training. The script
gives each run's training a step id no earlier run's training had."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.status import RunState
from tests.support.cli import FIXTURES
from tests.support.slurm_cluster import SlurmCluster

pytestmark = pytest.mark.slow


def wait_for(path: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} not there after {seconds} s"
        time.sleep(0.2)


def test_a_step_signal_meant_for_an_earlier_run_never_reaches_the_requeued_runs_training(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    """The job is requeued while it trains; once the next run trains, the test asks slurmctld to signal the
    earlier run's training step (job.0) with SIGTERM, as its retry would. That step is now a finished empty
    one: the training goes on and the run succeeds. Without the empty steps the training is job.0 again and
    the signal ends it (the run fails). The first run sleeps far longer than the test waits, so only the
    requeue ends it, however slow the machine; a run says it went on only when its sleep was not cut short by a
    signal (the requeue's signal to run 0's step may reach its sleep before its shell)."""
    command = (
        'run=${SLURM_RESTART_COUNT:-0}; echo "run $run is step $SLURM_STEP_ID"; '
        f'touch {tmp_path}/up-$run; sleep $(( run == 0 ? 600 : 12 )) && echo "run $run went on"'
    )
    spec = tmp_path / "stale.yaml"
    spec.write_text(
        json.dumps(
            {
                "name": "stale",
                "code": {"dir": str(FIXTURES / "tinyjob"), "command": ["bash", "-c", command]},
                "slurm": {"launch": "srun", "python": sys.executable, "kill_wait": 5, "status_every": 1},
            }
        )
    )
    run = Job.load(spec).submit("slurm", poll_seconds=0.2)
    job_id = run.status().details["job_id"]
    wait_for(tmp_path / "up-0", 60)
    cluster.run("scontrol", "requeue", job_id)
    wait_for(tmp_path / "up-1", 90)
    cluster.run("scancel", "--signal=TERM", f"{job_id}.0", check=False)  # its answer depends on the step's state
    status = run.wait(timeout=90, poll=0.5)
    said = [line.text for line in run.logs() if line.text.startswith("run ")]
    assert status.state is RunState.SUCCEEDED and status.details.get("restarts") == 1, (status, said)
    assert said == ["run 0 is step 0", "run 1 is step 1", "run 1 went on"], said
