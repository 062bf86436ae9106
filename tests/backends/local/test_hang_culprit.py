"""A rank that stops in the middle of an epoch while the others wait in a collective: the run ends with cause
``hang`` naming that rank, its node and the line it is on, and the others waiting in their collective — a real
torchrun run, the hang doctor inside every rank (cloudddp/injob/hang.py), the script an ordinary one."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.status import Cause, RunState
from tests.support.cli import cli
from tests.support.hang_script import SLEEP_LINE, TIMEOUT_S, script


@pytest.mark.slow
@pytest.mark.parametrize(("nodes", "culprit", "node"), [(1, 1, 0), (2, 2, 1)], ids=["1x2", "2x2"])
def test_a_rank_asleep_mid_epoch_is_named_with_its_line_and_the_others_are_shown_waiting(
    tmp_path: Path, nodes: int, culprit: int, node: int
) -> None:
    (tmp_path / "train.py").write_text(script(culprit))
    flag = tmp_path / "asleep"
    job = Job.from_dict(
        {
            "name": "culprit",
            "code": {"dir": str(tmp_path), "entry": "train.py"},
            "local": {"nodes": nodes, "processes_per_node": 2},
            "distribution": {"collective_timeout": f"{TIMEOUT_S}s"},
            "checkpoint": {"enabled": False},
            "env": {"SLEEPS_FLAG": str(flag)},
        }
    )
    run = job.submit("local")
    deadline = time.monotonic() + 180
    while not flag.exists():
        assert time.monotonic() < deadline and not run.status().state.terminal, run.status()
        time.sleep(0.2)
    asleep_at = time.time()
    status = run.wait(timeout=TIMEOUT_S + 120, poll=0.5)

    log = "\n".join(line.text for line in run.logs())  # the verdict, or why there was none
    assert status.state is RunState.FAILED and status.cause is Cause.HANG, (status, log[-4000:])
    assert status.ended_at is not None and status.ended_at - asleep_at < TIMEOUT_S + 60, status.ended_at - asleep_at
    named = f"hang: rank {culprit} on node {node} ("
    assert status.message.startswith(named), status.message
    assert f"train.py:{SLEEP_LINE} in <module>: time.sleep(3600)" in status.message, status.message
    others = sorted(set(range(2 * nodes)) - {culprit})
    waiting = f"rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))}: waiting in "
    assert waiting in status.message, status.message
    failure = status.details["failure"]
    assert failure["culprits"] == [culprit] and failure["culprit_node"] == str(node), failure
    assert failure["log_tail"][0] == f"rank {culprit}, most recent call first:", failure["log_tail"]
    shown = cli("status", run.run_id)  # what a person sees
    assert named in shown.stdout and re.search(r"cause\s+hang", shown.stdout), shown.stdout
    assert "Traceback" not in "\n".join(failure["log_tail"]), failure["log_tail"]  # the stacks only
