"""Your own script's progress: the plan says what makes a resubmit resume, and a run that left files in its
working folder (discarded with it) names them at its end with the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.base import RunState

from .support.cli import ROOT

SAVER = """
import os
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 0:
    with open("snapshot.pt", "wb") as f:  # a tutorial's habit: progress saved next to the script
        f.write(b"epoch 3")
dist.barrier()
dist.destroy_process_group()
"""


def own_job(folder: Path) -> Job:
    (folder / "train.py").write_text(SAVER)
    return Job.from_dict(
        {"name": "saver", "code": {"dir": ".", "entry": "train.py"}, "local": {"processes_per_node": 2}},
        base_dir=folder,
    )


def test_the_plan_of_an_own_script_says_what_makes_a_resubmit_resume(tmp_path: Path) -> None:
    own = own_job(tmp_path).render("local")
    assert any("resumes only if it saves its progress under $CLOUDDDP_CHECKPOINT_DIR" in d for d in own.decisions)
    shared = Job.load(ROOT / "jobs" / "digits-local.yaml").render("local")
    assert not any("your script" in d for d in shared.decisions)  # the shared script checkpoints by itself


@pytest.mark.slow
def test_a_file_the_script_left_in_its_working_folder_is_named_at_the_end_with_the_fix(tmp_path: Path) -> None:
    run = own_job(tmp_path).submit("local")
    status = run.wait(timeout=120, poll=0.5)
    assert status.state is RunState.SUCCEEDED, status
    assert status.details["left_behind"] == ["snapshot.pt"]
    assert "snapshot.pt was written in the working folder and discarded with the run" in status.message
    assert "$CLOUDDDP_CHECKPOINT_DIR" in status.message
    assert not (tmp_path / "snapshot.pt").exists()  # the source folder is left alone
