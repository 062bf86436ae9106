"""``cloudddp stacks`` on a healthy running Slurm run, on the real cluster (tests/support/slurm_cluster.py): 2 nodes ×
2 processes under torchrun; an ``srun --overlap`` step asks every rank once on its node, each rank is shown once, and
the run then goes on, finishes, and its checkpoint is whole."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.status import RunState
from tests.support.cli import cli
from tests.support.slurm_cluster import SlurmCluster
from tests.support.stacks_job import (
    assert_dumps_in_the_log,
    last_checkpoint,
    ranks_shown,
    steps_of,
    wait_for_steps,
    write_script,
)

pytestmark = pytest.mark.slow


@pytest.mark.timeout(300)
def test_stacks_of_a_running_slurm_run_show_every_rank_once_and_leave_it_running(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    flag = tmp_path / "done"
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    job = Job.from_dict(
        {
            "name": "stacks",
            "code": {"dir": str(write_script(tmp_path / "code")), "entry": "train.py"},
            "resources": {"nodes": 2, "processes_per_node": 2},
            "env": {"STACKS_DONE_FLAG": str(flag), "CHECKPOINTS": str(checkpoints)},
            "slurm": {"python": sys.executable, "kill_wait": 5, "status_every": 1},
        }
    )
    run = job.submit("slurm", poll_seconds=0.2)

    def log() -> str:
        return "\n".join(line.text for line in run.logs())

    wait_for_steps(log, 4)
    shown = cli("stacks", run.run_id)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert shown.stdout.startswith("4 of 4 ranks gave their stacks in "), shown.stdout
    assert ranks_shown(shown.stdout) == [0, 1, 2, 3], shown.stdout  # each rank once, none twice
    assert "train.py:" in shown.stdout, shown.stdout

    again = json.loads(cli("stacks", run.run_id, "--json").stdout)  # the first dump in the log is not read again
    assert [r["rank"] for r in again["ranks"]] == [0, 1, 2, 3], again
    assert again["missing"] == {} and {r["host"] for r in again["ranks"]} == {"node1", "node2"}, again
    assert run.status().state is RunState.RUNNING
    twice = dict.fromkeys(range(4), 2)  # each rank asked once by each call
    assert_dumps_in_the_log(run.logs, twice)

    flag.touch()
    status = run.wait(timeout=120, poll=0.5)
    assert status.state is RunState.SUCCEEDED, (status, log()[-3000:])
    finished = steps_of(log())
    assert len(finished) == 4 and len(set(finished.values())) == 1, finished
    assert last_checkpoint(checkpoints) == finished[0], finished
    assert "Traceback" not in log()
