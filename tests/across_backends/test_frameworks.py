"""The conformance matrix, local cells: the framework projects of ``examples/`` as they are, under real torchrun,
trained, stopped (``cloudddp cancel``), resumed from their own checkpoint by a plain resubmit, with their metrics
in ``cloudddp metrics --json`` from the framework's own logs (no CLOUDDDP_METRIC line in any of them).

The other cells run where each framework is most at risk: Lightning on Slurm (torchrun 2×2) and SageMaker, the
Trainer on Azure ML (2 nodes), the DataLoader script on SageMaker and Slurm (docs/frameworks/, the matrix's table).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cloudddp.api import Job, Run
from cloudddp.backends.status import RunState
from tests.support.cli import cli
from tests.support.frameworks import project, steps_in
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


def text(run: Run) -> str:
    return "\n".join(line.text for line in run.logs())


def metric_steps(run: Run, name: str) -> list[int]:
    """The steps of ``name``'s records as ``cloudddp metrics --json`` prints them."""
    shown = cli("metrics", run.run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    records = [json.loads(line) for line in shown.stdout.splitlines()]
    return [r["step"] for r in records if name in r]


@pytest.mark.timeout(300)
def test_accelerate_on_local_2x2_trains_as_one_world_stops_into_save_state_and_resumes(tmp_path: Path) -> None:
    """Accelerate is most at risk on a machine without GPUs: without ``ACCELERATE_USE_CPU`` each process trains
    alone (48 steps as one world of 4, 192 alone). 2 nodes × 2 processes, a stop mid-epoch, the resubmit resumes
    at the saved step and skips the batches done."""
    args = ["--output_dir", "{{checkpoint_dir}}", "--epochs", "3", "--save_every", "10"]
    # 0.8 s a step: step 15's record reaches `cloudddp metrics` up to 10 s after the step (the tracker flushes every
    # 5 s, the launcher looks every 5 s), more on a loaded machine; the stop must still leave records to resume to
    spec = project("accelerate", tmp_path, [*args, "--step_sleep", "0.8"])
    first = Job.load(spec).submit("local")
    wait_until(lambda: len(metric_steps(first, "train_loss")) >= 3, 150, poll=1)
    assert cli("cancel", first.run_id).returncode == 0
    assert first.wait(timeout=90, poll=0.5).state is RunState.CANCELLED
    log = text(first)
    [stopped_at] = steps_in(r"stopped: saved at step (\d+)", log)
    assert 15 <= stopped_at < 40, log[-3000:]  # the resume logs train_loss at 40 and 45 at least
    before = metric_steps(first, "train_loss")
    assert before == sorted(set(before)) and before[-1] <= stopped_at, before

    second = Job.load(project("accelerate", tmp_path / "again", args)).submit("local")
    assert second.wait(timeout=180, poll=0.5).state is RunState.SUCCEEDED, text(second)[-3000:]
    log = text(second)
    assert steps_in(r"resumed from checkpoint_\d+ at step (\d+)", log) == [stopped_at], log[-3000:]
    assert steps_in(r"finished at step (\d+)", log) == [48], "one world of 4 ranks: 16 steps an epoch"
    after = metric_steps(second, "train_loss")
    assert after and after[0] > stopped_at and after[-1] == 45, after  # this run's records only
