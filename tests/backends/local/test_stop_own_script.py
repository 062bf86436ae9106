"""A cancel is a checkpoint for a user's own script on the local backend: a tutorial-style DDP script with
``DataLoader(num_workers=2)`` (tests/support/dataloader_saver.py), 2 nodes × 2 processes under real torchrun.

The cancel reaches each node's torchrun agent, which stops its workers with ``killpg``; each worker is cloudddp's rank
launcher, which passes the stop on to its program once, so no DataLoader worker is signalled and the script saves;
a resubmit resumes from the step it saved."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.status import RunState
from tests.support.cli import cli
from tests.support.dataloader_saver import (
    ENTRY,
    RUNNING,
    WORKER_KILLED,
    dataloader_saver_code,
    resumed,
    saved,
    sigterms,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

SAVE_DELAY = 8.0
"""Seconds the save takes after SIGTERM: well inside the local grace (30 s), long enough that a rank killed by a
second signal or by a launcher that does not wait could not have saved."""


def saver_job(tmp_path: Path, steps: int) -> Path:
    code = dataloader_saver_code(tmp_path)
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: dataloader-saver-local\n"
        f"code: {{dir: {code}, entry: {ENTRY}, args: [--steps, '{steps}', --save-delay, '{SAVE_DELAY}']}}\n"
        "resources: {nodes: 2, gpus_per_node: 0}\n"
        "local: {nodes: 2, processes_per_node: 2}\n"
    )
    return spec


def text(run: object) -> str:
    return "\n".join(line.text for line in run.logs())  # type: ignore[attr-defined]


@pytest.mark.timeout(300)
def test_a_cancel_lets_an_own_script_with_dataloader_workers_save_once_per_rank_and_a_resubmit_resumes(
    tmp_path: Path,
) -> None:
    first = Job.load(saver_job(tmp_path, 100000)).submit("local")
    wait_until(lambda: RUNNING in text(first), 120, poll=0.2)
    assert cli("cancel", first.run_id).returncode == 0
    assert first.wait(timeout=60, poll=0.5).state is RunState.CANCELLED
    log = text(first)
    assert sigterms(log) == {0: 1, 1: 1, 2: 1, 3: 1}, log[-3000:]  # each rank once, from its own launcher
    assert not WORKER_KILLED.search(log), log[-3000:]
    (where,) = saved(log)  # after the whole slow save: the grace held

    second = Job.load(saver_job(tmp_path, 3)).submit("local")
    assert second.wait(timeout=180, poll=0.5).state is RunState.SUCCEEDED, text(second)[-3000:]
    assert resumed(text(second)) == {rank: where for rank in range(4)}
