"""Reliability with the real training script on the local backend: faults injected for real.

- cancel (SIGTERM, what spot reclamation sends) → rank 0 checkpoints → resubmit continues, no epoch lost
  or repeated;
- SIGKILL of one rank → torchrun restarts the group → resume from the last checkpoint → final
  parameters bitwise equal to an uninterrupted run;
- a rank that stops participating (SIGSTOP) → the others fail after the spec's collective timeout.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
import torch

from cloudddp.api import Job, Run
from cloudddp.backends.plugins import backend_class, load_spec, names
from cloudddp.backends.status import RunState
from tests.support.cli import ROOT, cli
from tests.support.faults import rank_processes, wait_for_rank
from tests.support.train_helpers import assert_every_step_once

pytestmark = pytest.mark.slow
DIGITS = ROOT / "jobs" / "digits-local.yaml"


def epoch_ends(run: Run) -> list[int]:
    return [r.epoch for r in run.metrics() if "epoch_time" in r.values]


def test_cancelled_run_checkpoints_and_a_resubmit_continues_without_losing_or_repeating_an_epoch() -> None:
    """A cancel that lands mid-epoch checkpoints there and the resubmit continues at the next step: every step
    of every epoch once. A cancel can also land between epochs (then the checkpoint is the epoch's end, and a
    resume that ignored the step within the epoch would pass unseen), so the run is cancelled and resubmitted
    until one stop has landed mid-epoch (at most three tries; evaluation only at the end keeps the gap between
    epochs short), then the last resubmit trains to the end."""
    args = "code.args=[--dataset, digits, --epochs, '8', --log-every, '1', --eval-every, '8']"
    stopped_runs: list[Run] = []
    mid_epoch = False
    while not mid_epoch and len(stopped_runs) < 3:
        run = Job.load(DIGITS, [args, "name=resume-demo", "checkpoint.resume=auto"]).submit("local")
        for record in run.metrics(follow=True):
            if record.epoch >= len(stopped_runs) + 2:  # into epoch 2 (then further with each try)
                break
        result = cli("cancel", run.run_id)
        assert result.returncode == 0
        assert run.status().state is RunState.CANCELLED
        lines = [line.text for line in run.logs()]
        stopped = [text for text in lines if "stopping on SIGTERM" in text]
        assert stopped, "no rank said it saw SIGTERM and wrote a checkpoint; the log's end:\n" + "\n".join(lines[-60:])
        mid_epoch = "stopping on SIGTERM at epoch" in stopped[0]  # else "at the end of epoch N"
        stopped_runs.append(run)
    assert mid_epoch, "three cancels all landed between epochs"

    last = Job.load(DIGITS, [args, "name=resume-demo", "checkpoint.resume=auto"]).submit("local")
    assert last.wait(timeout=240, poll=0.5).state is RunState.SUCCEEDED
    runs = [*stopped_runs, last]
    for k, after in enumerate(runs[1:], 1):
        resumed = [line.text for line in after.logs() if "resumed from" in line.text]
        done = [e for run in runs[:k] for e in epoch_ends(run)]
        assert resumed and f"at epoch {(done or [0])[-1] + 1}," in resumed[0], (resumed, done)
    assert [e for run in runs for e in epoch_ends(run)] == list(range(1, 9))
    assert_every_step_once([r for run in runs for r in run.metrics()], epochs=8)


def _final_params(run: Run) -> dict[str, torch.Tensor]:
    return torch.load(Path(run.status().details["run_dir"]) / "outputs" / "model.pt")


def test_killed_rank_restarts_from_checkpoint_and_ends_bitwise_equal_to_an_uninterrupted_run() -> None:
    args = "code.args=[--dataset, digits, --epochs, '5', --deterministic, --log-every, '1']"
    clean = Job.load(DIGITS, [args, "name=det-clean", "checkpoint.resume=auto"]).submit("local")
    assert clean.wait(timeout=240, poll=0.5).state is RunState.SUCCEEDED

    faulty = Job.load(DIGITS, [args, "name=det-faulty", "limits.max_restarts=2", "checkpoint.resume=auto"]).submit(
        "local"
    )
    run_dir = faulty.status().details["run_dir"]
    for record in faulty.metrics(follow=True):
        if record.epoch == 3 and "epoch_time" not in record.values:
            break  # in epoch 3, after the epoch-2 checkpoint
    os.kill(wait_for_rank(run_dir, 1), signal.SIGKILL)
    status = faulty.wait(timeout=240, poll=0.5)
    assert status.state is RunState.SUCCEEDED, status
    assert any("resumed from" in line.text for line in faulty.logs())
    a, b = _final_params(clean), _final_params(faulty)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


FAILS_WITHIN = 180
"""Seconds a run with a rank frozen may take to fail: well under torch's own collective timeout (600 s), which a run
that ignored the spec's would wait out. On a machine running two suites it took 60 s (the 5 s timeout, then
torchrun's end and the supervisor's, each slowed); gloo's message names the 5 s itself."""


@pytest.mark.timeout(FAILS_WITHIN + 300)
def test_a_rank_that_stops_participating_fails_the_run_within_the_collective_timeout() -> None:
    job = Job.load(
        DIGITS,
        [
            "code.args=[--dataset, digits, --epochs, '50', --log-every, '1']",
            "distribution.collective_timeout=5",
            "limits.stall_timeout='off'",  # the watchdog would fail a hung run too: only the timeout may end it
            "name=hang",
        ],
    )
    run = job.submit("local")
    run_dir = run.status().details["run_dir"]
    next(run.metrics(follow=True))
    pid = rank_processes(run_dir)[1][0]
    os.kill(pid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    try:
        status = run.wait(timeout=FAILS_WITHIN, poll=0.5)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert status.state is RunState.FAILED, status
    assert time.monotonic() - frozen_at < FAILS_WITHIN, "it did not hang"
    text = "\n".join(line.text for line in run.logs())
    assert "stall" not in text.lower() and "stall" not in str(status.message).lower()
    # gloo's own error names the spec's timeout (5 s), not torch's default (600 s) or anything else
    assert re.search(r"[Tt]imed out .*\b5000 ?ms\b", text), text[-3000:]


JOB_OF = {"local": "digits-local", "sagemaker": "cifar10-smddp", "azureml": "cifar10-azureml", "slurm": "cifar10-slurm"}


@pytest.mark.parametrize(("backend", "job"), sorted(JOB_OF.items()))
def test_the_collective_timeout_is_rendered_to_every_backend(backend: str, job: str) -> None:
    """What the timeout test above proves locally, every backend tells its processes the same way."""
    built_in = {name for name in names() if backend_class(name).__module__.startswith("cloudddp.")}
    assert built_in == set(JOB_OF), "a built-in backend this test does not render"
    spec = load_spec(ROOT / "jobs" / f"{job}.yaml", ["distribution.collective_timeout=97"])
    text = backend_class(backend)().render(spec).text()
    assert re.search(r"CLOUDDDP_COLLECTIVE_TIMEOUT\W+97\b", text), text[:3000]
