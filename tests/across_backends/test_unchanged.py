"""Scripts written without cloudddp, run unchanged, stopped mid-epoch on the local backend (real torchrun) and
resumed by a plain resubmit: what each rank trained at each step (tests/support/sample_trace.py) is compared with
an uninterrupted run, sample by sample. The stop saves within the grace (no SIGKILL) because cloudddp's hooks do
the framework's part in the script's process (cloudddp/injob/stop_hooks.py); nothing in the scripts knows of it.

- Lightning: ``examples/lightning/train.py`` (a LightningModule, a DataModule, ``ModelCheckpoint(save_last=True)``,
  ``fit(ckpt_path="last")``, ``DataLoader(num_workers=2, shuffle=True)``: no callback of cloudddp's);
- the Trainer: ``examples/huggingface/train.py`` (``trainer.train()``, ``output_dir`` in the checkpoint folder);
- Hugging Face's own ``run_clm.py``, byte for byte (``make conformance``; not in the repository: fetched code is not
  committed here, tests/fixtures/unchanged/SOURCES.md names the file and its sha256);
- the Slurm, SageMaker and Azure ML cells are in the backends' ``test_frameworks.py``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from cloudddp.api import Job, Run
from cloudddp.backends.status import RunState
from tests.support import sample_trace, unchanged
from tests.support.cli import cli
from tests.support.frameworks import steps_in, succeeded, traced
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

LIGHTNING = ["--num-nodes", "{{nodes}}", "--devices", "{{processes_per_node}}", "--root", "{{checkpoint_dir}}"]
EPOCHS = ["--max-epochs", "2", "--every-n-steps", "1000"]
"""Two epochs of 28 steps at world 2 (1792 samples, batches of 32), no periodic checkpoint: only the stop's
``last.ckpt`` can carry a resume into the middle of the second epoch."""


STOPPED_STEP_SLEEP = "1.0"
"""Seconds a step of a run that is cancelled sleeps: the cancel follows the steps its log shows by seconds on a loaded
machine (the log's way through torchrun and the supervisor, a `cloudddp cancel` process), and the steps left then
must outlast it (at 0.2 s, 20 steps left were trained to the end once, on a machine running two suites). Only the
steps before the cancel sleep it."""


def text(run: Run) -> str:
    return "\n".join(line.text for line in run.logs())


def cancelled(job: Path, overrides: list[str], after: int, saved: str) -> tuple[str, int]:
    """``job`` run here and cancelled once rank 0 has trained ``after`` steps; its log and the step both ranks say
    they stopped at (``cloudddp: stopped at step N: saved <saved>``, ``{N}`` in ``saved`` standing for N), which must
    be one step, with no rank's traceback and no DataLoader worker killed."""
    first = Job.load(job, overrides).submit("local")
    wait_until(lambda: len(sample_trace.steps(text(first)).get(0, [])) >= after, 300, poll=0.2)
    assert cli("cancel", first.run_id).returncode == 0
    assert first.wait(timeout=60, poll=0.5).state is RunState.CANCELLED
    log = text(first)
    stops = steps_in(r"cloudddp: stopped at step (\d+): saved " + saved.replace("{N}", r"\1"), log)
    assert len(stops) == 2 and stops[0] == stops[1] >= after, log[-3000:]  # both ranks, one step
    assert "Traceback" not in log and "killed by signal" not in log, log[-3000:]
    return log, stops[0]


def assert_each_sample_once(stopped: list[str], resumed: str, whole: str, stop: int) -> None:
    """Each rank trained ``stop`` steps in the stopped runs, and those and its last resume's, in order, are the
    uninterrupted run's: the same samples at the same steps, none twice, none left out."""
    after, expected = sample_trace.steps(resumed), sample_trace.steps(whole)
    assert sorted(expected) == [0, 1] and stop < len(expected[0]), (expected.keys(), stop)  # a stop mid-run
    for rank in (0, 1):
        trained = [step for log in stopped for step in sample_trace.steps(log).get(rank, [])]
        assert len(trained) == stop, (rank, len(trained), stop)
        assert trained + after[rank] == expected[rank], f"rank {rank}: the steps differ from the whole run's"


@pytest.fixture(scope="module")
def lightning_whole(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The Lightning example's uninterrupted run at local 1 × 2, in a cloudddp home of its own: its log, traced."""
    job = traced("lightning", tmp_path_factory.mktemp("lit-whole"), [*LIGHTNING, *EPOCHS])
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CLOUDDDP_HOME", str(tmp_path_factory.mktemp("lit-whole-home")))
        whole = succeeded(Job.load(job, ["name=lit-whole"]).submit("local"))
    assert len(sample_trace.steps(whole).get(0, [])) == 56, whole[-3000:]
    return whole


@pytest.mark.timeout(600)
def test_unchanged_lightning_stopped_on_an_epochs_last_step_then_mid_epoch_resumes_each_sample_once(
    lightning_whole: str, tmp_path: Path
) -> None:
    """One training stopped twice, each stop resumed by a plain resubmit. The first stop is heard on step 28, the
    first epoch's last (each rank signals itself there: the tracer's ``SAMPLE_TRACE_SIGTERM_AT``), and saves
    ``last.ckpt`` at step 28; its resume starts the second epoch shuffled as the uninterrupted run's second epoch is
    (its sampler's epoch set before its loader's iterator is made). That resume is cancelled mid-epoch (``cloudddp
    cancel``) and saves ``last.ckpt`` at the step both ranks agree on; the last resume trains to the end. The three
    runs together train, sample by sample, what the uninterrupted run trains."""
    first = traced("lightning", tmp_path / "first", [*LIGHTNING, *EPOCHS])
    job = yaml.safe_load(first.read_text())
    job["env"]["SAMPLE_TRACE_SIGTERM_AT"] = "28"
    first.write_text(yaml.safe_dump(job, sort_keys=False))
    log = succeeded(Job.load(first, ["name=lit-stops"]).submit("local"))
    assert steps_in(r"cloudddp: stopped at step (\d+): saved \S+last\.ckpt", log) == [28, 28], log[-3000:]
    slow = traced("lightning", tmp_path / "second", [*LIGHTNING, *EPOCHS, "--step-sleep", STOPPED_STEP_SLEEP])
    log2, stop = cancelled(slow, ["name=lit-stops"], 8, r"\S+last\.ckpt")  # 8 steps into epoch 2
    assert 36 <= stop < 56, log2[-3000:]
    again = traced("lightning", tmp_path / "third", [*LIGHTNING, *EPOCHS])
    log3 = succeeded(Job.load(again, ["name=lit-stops"]).submit("local"))
    assert "last.ckpt" in log3 and steps_in(r"finished at step (\d+)", log3) == [56, 56], log3[-3000:]
    assert_each_sample_once([log, log2], log3, lightning_whole, stop)


HF_ARGS = ["--output_dir", "{{checkpoint_dir}}", "--max_steps", "60", "--save_steps", "1000"]
"""60 steps (an epoch is 32 at world 2: 512 samples, batches of 8), no periodic checkpoint before the end: only
the stop's ``checkpoint-N`` can carry a resume into the second epoch."""
TRAINER_SAVED = r"checkpoint-{N} "
"""What the Trainer's stop line says it saved (``checkpoint-N in <output_dir>``)."""


@pytest.mark.timeout(420)
def test_unchanged_trainer_stopped_mid_epoch_saves_its_checkpoint_and_resumes_at_the_next_step(tmp_path: Path) -> None:
    """``examples/huggingface/train.py`` (``trainer.train()``, no callback of cloudddp's, DataLoader workers):
    the stop saves ``checkpoint-N`` at the step both ranks reach, the resubmit resumes at step N + 1 (0 steps
    redone) and each rank trains, sample by sample, what it trains uninterrupted."""
    whole = succeeded(Job.load(traced("huggingface", tmp_path / "whole", HF_ARGS), ["name=hf-whole"]).submit("local"))
    assert len(sample_trace.steps(whole).get(0, [])) == 60, whole[-3000:]
    slow = traced("huggingface", tmp_path / "first", [*HF_ARGS, "--step_sleep", STOPPED_STEP_SLEEP])
    log, stop = cancelled(slow, ["name=hf-stop"], 36, TRAINER_SAVED)  # into epoch 2
    again = traced("huggingface", tmp_path / "second", HF_ARGS)
    log2 = succeeded(Job.load(again, ["name=hf-stop"]).submit("local"))
    assert f"checkpoint-{stop}, the newest complete checkpoint" in log2, log2[-3000:]
    assert steps_in(r"finished at step (\d+)", log2) == [60, 60], log2[-3000:]
    assert_each_sample_once([log], log2, whole, stop)


def run_clm_job(root: Path, inputs: unchanged.ClmInputs, name: str, epochs: int) -> Path:
    """A job.yaml running Hugging Face's own ``run_clm.py`` (as it is) at local 1×2, its ``--output_dir`` the job's
    checkpoint folder, offline, with the sample tracer."""
    code = root / name
    code.mkdir(parents=True)
    shutil.copyfile(unchanged.RUN_CLM, code / "run_clm.py")
    env = unchanged.offline_env(inputs, {})
    env.update(sample_trace.install_into(code))
    job = {
        "name": "run-clm",
        "code": {
            "dir": ".",
            "entry": "run_clm.py",
            "args": unchanged.run_clm_args(inputs, "{{checkpoint_dir}}", epochs=epochs),
        },
        "resources": {"nodes": 1, "processes_per_node": 2},
        "checkpoint": {"enabled": True},
        "env": env,
    }
    (code / "job.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    return code / "job.yaml"


@pytest.mark.conformance
@pytest.mark.timeout(600)
@pytest.mark.skipif(
    not unchanged.unchanged(unchanged.RUN_CLM),
    reason="Hugging Face's run_clm.py is not in the repository (code fetched from GitHub is not committed here): "
    "put it at tests/fixtures/unchanged/huggingface/ as tests/fixtures/unchanged/SOURCES.md says",
)
def test_hugging_faces_own_run_clm_stopped_mid_epoch_resumes_at_the_next_step_sample_by_sample(tmp_path: Path) -> None:
    inputs = unchanged.clm_inputs(tmp_path / "inputs")
    whole = succeeded(Job.load(run_clm_job(tmp_path, inputs, "whole", 3), ["name=run-clm-whole"]).submit("local"), 400)
    log, stop = cancelled(run_clm_job(tmp_path, inputs, "first", 3), [], 100, TRAINER_SAVED)  # into epoch 2
    log2 = succeeded(Job.load(run_clm_job(tmp_path, inputs, "second", 3)).submit("local"), 400)
    assert f"checkpoint-{stop}, the newest complete checkpoint" in log2, log2[-3000:]
    assert_each_sample_once([log], log2, whole, stop)
