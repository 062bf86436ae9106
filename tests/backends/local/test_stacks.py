"""``cloudddp stacks`` on a healthy running 2×2 local run (real torchrun): every rank is shown once, with the line
it is on, twice in a row; the run then goes on, finishes and its checkpoint is whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.status import RunState
from tests.support.cli import cli
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
def test_stacks_of_a_running_2x2_run_show_every_rank_once_and_leave_it_running(tmp_path: Path) -> None:
    flag = tmp_path / "done"
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    job = Job.from_dict(
        {
            "name": "stacks",
            "code": {"dir": str(write_script(tmp_path / "code")), "entry": "train.py"},
            "local": {"nodes": 2, "processes_per_node": 2},
            "env": {"STACKS_DONE_FLAG": str(flag), "CHECKPOINTS": str(checkpoints)},
        }
    )
    run = job.submit("local")

    def log() -> str:
        return "\n".join(line.text for line in run.logs())

    wait_for_steps(log, 4)
    shown = cli("stacks", run.run_id)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("4 of 4 ranks gave their stacks in "), shown.stdout
    assert ranks_shown(shown.stdout) == [0, 1, 2, 3], shown.stdout  # each rank once, none twice
    assert "train.py:" in shown.stdout, shown.stdout  # the script's own line

    again = cli("stacks", run.run_id, "--json", "--all-threads")  # a second dump in the log is not read twice
    assert again.returncode == 0, again.stderr
    document = json.loads(again.stdout)
    assert [r["rank"] for r in document["ranks"]] == [0, 1, 2, 3] and document["missing"] == {}, document
    assert sorted(r for g in document["groups"] for r in g["ranks"]) == [0, 1, 2, 3], document
    assert all(len({t["name"] for t in r["threads"]}) == len(r["threads"]) for r in document["ranks"]), document
    assert run.status().state is RunState.RUNNING
    twice = dict.fromkeys(range(4), 2)  # each rank asked once by each call
    assert_dumps_in_the_log(run.logs, twice)

    flag.touch()
    status = run.wait(timeout=120, poll=0.5)
    assert status.state is RunState.SUCCEEDED, (status, log()[-3000:])
    finished = steps_of(log())
    assert len(set(finished.values())) == 1 and len(finished) == 4, finished
    assert last_checkpoint(checkpoints) == finished[0], finished  # the last save is whole and the newest
    assert "Traceback" not in log()
