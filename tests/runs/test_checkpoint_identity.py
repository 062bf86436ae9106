"""One training, one checkpoint folder: two ``init`` projects of the same name in different folders never share
one; a resumed checkpoint that does not fit the model ends with a message naming the folder, the run that wrote
it and the way out; a finished training resubmitted says "nothing left to train" (real torchrun, locally)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cloudddp.api import Job, Run
from cloudddp.backends.status import RunState
from cloudddp.runs.resumed import misfit_line
from tests.support.cli import cli

WIDER = "model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 8), nn.Linear(8, 1)).to(device))"


def project(folder: Path) -> Path:
    made = cli("init", str(folder))
    assert made.returncode == 0, made.stderr
    return folder / "job.yaml"


def another_model(job: Path) -> None:
    script = job.parent / "train.py"
    text = script.read_text()
    assert "model = DistributedDataParallel(nn.Linear(16, 1).to(device))" in text
    script.write_text(text.replace("model = DistributedDataParallel(nn.Linear(16, 1).to(device))", WIDER))


def submitted(job: Path) -> tuple[Run, str]:
    """Submit ``job`` from the command line and follow it to its end: the run and what the command said."""
    done = cli("submit", str(job), timeout=300)
    found = re.search(r"submitted (\S+)", done.stderr)
    assert found, done.stderr
    return Run.attach(found.group(1)), done.stderr


def test_the_load_state_dict_error_lines_are_recognized() -> None:
    assert misfit_line(["x", "RuntimeError: Error(s) in loading state_dict for Linear:", "y"]) is not None
    assert misfit_line(["\tsize mismatch for weight: copying a param with shape torch.Size([1, 16])"]) is not None
    assert misfit_line(["Traceback (most recent call last):", "ZeroDivisionError: division by zero"]) is None


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_projects_of_one_name_an_edited_model_and_a_finished_training(tmp_path: Path) -> None:
    first = project(tmp_path / "a" / "my-project")
    second = project(tmp_path / "b" / "my-project")
    assert Job.load(first).spec.name == Job.load(second).spec.name == "my-project"

    run, said = submitted(first)
    assert run.status().state is RunState.SUCCEEDED, said
    assert len([r for r in run.metrics() if r.values.get("loss") is not None]) == 3

    # The second project, same name, another model: its own folder, trained from scratch.
    another_model(second)
    other, said = submitted(second)
    status = other.status()
    assert status.state is RunState.SUCCEEDED, (status.message, said)
    assert [r.step or r.values.get("epoch") for r in other.metrics()] and len(list(other.metrics())) == 3
    assert "nothing left" not in status.message

    # The first project resubmitted unchanged: the training had finished; the CLI, status and the API say so.
    again, said = submitted(first)
    status = again.status()
    assert status.state is RunState.SUCCEEDED and "nothing left to train" in status.message, status.message
    assert "nothing left to train" in said, said
    assert run.run_id in status.message  # the run that wrote the folder
    assert [w for w in again.warnings if w.startswith("nothing left to train")], again.warnings  # the Python API
    shown = cli("status", again.run_id)
    assert "nothing left to train" in shown.stdout + shown.stderr

    # The first project's model edited: the resumed checkpoint does not fit; the cause names the folder and the
    # way out.
    another_model(first)
    misfit, said = submitted(first)
    status = misfit.status()
    folder = Job.load(first).render("local").target.checkpoints
    assert status.state is RunState.FAILED, status.message
    assert "does not fit the model" in status.message and str(folder) in status.message, status.message
    assert "checkpoint.resume=never" in status.message and "checkpoint.key" in status.message, status.message
    assert "does not fit the model" in said and "checkpoint.resume=never" in said, said
    fresh = cli("submit", str(first), "-o", "checkpoint.resume=never", timeout=300)
    assert fresh.returncode == 0 and "succeeded" in fresh.stderr, fresh.stderr
