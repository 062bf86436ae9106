"""A training keeps its checkpoint folder when only its arguments or its size change: real torchrun runs of the
shared script, resubmitted with an added argument and then on another node count, each resuming where the last
one stopped; the plan names the folder, what the run resumes from, and the arguments that wrote it. A variant named
by ``checkpoint.key`` gets a folder of its own (here and in the clouds' plans; tests/across_backends/
test_checkpoint_folder.py has every backend)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from cloudddp.api import Job, Run
from cloudddp.backends.checkpoints.contents import RECORD
from cloudddp.backends.status import RunState
from tests.support.cli import ROOT
from tests.support.harnesses import AzureMLHarness, SageMakerHarness

pytestmark = pytest.mark.slow
DIGITS = ROOT / "jobs" / "digits-local.yaml"
BASE = ["name=grow", "checkpoint.resume=auto"]


def epoch_ends(run: Run) -> list[int]:
    return [r.epoch for r in run.metrics() if "epoch_time" in r.values]


def finished(run: Run) -> None:
    status = run.wait(timeout=300, poll=0.5)
    assert status.state is RunState.SUCCEEDED, (status, [line.text for line in run.logs()][-30:])


def resubmit(overrides: list[str], *, resumes: str, was: str, now: str) -> tuple[Run, Path]:
    """Render (the plan says what it resumes from, and that the arguments differ), then run to the end."""
    job = Job.load(DIGITS, [*BASE, *overrides])
    plan = job.render("local")
    line = next(d for d in plan.decisions if d.startswith("checkpoints in"))
    assert f"resumes from {resumes}" in line and "arguments and size do not move it" in line, line
    differ = f"the arguments differ from those that wrote the checkpoint it will resume (was: {was}, now: {now})"
    assert any(differ in w for w in plan.warnings), plan.warnings
    run = job.submit("local")
    finished(run)
    return run, Path(plan.request.env["CLOUDDDP_CHECKPOINT_DIR"])


def test_a_resubmit_with_an_added_argument_and_with_another_node_count_resumes_from_the_last_checkpoint() -> None:
    same = [*BASE, "code.args=[--dataset, digits, --epochs, '2']"]
    first = Job.load(DIGITS, same).submit("local")
    finished(first)
    assert epoch_ends(first) == [1, 2]
    assert_a_named_variant_gets_its_own_folder(same)

    added = "code.args=[--dataset, digits, --epochs, '3', --log-every, '4']"
    second, folder = resubmit(
        [added],
        resumes="ckpt-e0002",
        was="train.py --dataset digits --epochs 2",
        now="train.py --dataset digits --epochs 3 --log-every 4",
    )
    assert any("resumed from" in line.text and "at epoch 3," in line.text for line in second.logs())
    assert epoch_ends(second) == [3]

    wider = [
        "code.args=[--dataset, digits, --epochs, '4', --log-every, '4']",
        "local.nodes=2",
        "local.processes_per_node=1",
    ]
    third, same_folder = resubmit(
        wider,
        resumes="ckpt-e0003",
        was="train.py --dataset digits --epochs 3 --log-every 4",
        now="train.py --dataset digits --epochs 4 --log-every 4",
    )
    assert same_folder == folder
    assert json.loads((Path(third.status().details["run_dir"]) / "plan.json").read_text())["request"]["nnodes"] == 2
    assert any("resumed from" in line.text and "at epoch 4," in line.text for line in third.logs())
    assert epoch_ends(third) == [4]
    runs = [json.loads(line) for line in (folder / RECORD).read_text().splitlines()]
    assert [r["run_id"] for r in runs] == [first.run_id, second.run_id, third.run_id]
    assert runs[2]["argv"] == ["train.py", "--dataset", "digits", "--epochs", "4", "--log-every", "4"]


WHERE = """
import os, sys
print(f"cwd={os.getcwd()} left={os.path.exists('left.txt')}", flush=True)
open("left.txt", "w").write("written beside the code, not kept")
"""


def test_a_resubmit_runs_in_the_same_working_folder_as_the_run_before_it_emptied_afresh(tmp_path: Path) -> None:
    """Frameworks record absolute paths under the working folder in their checkpoints (Lightning's dirpath): a
    training with checkpoints runs in one physical folder every time, unpacked afresh (what the last run left there
    is gone, as in a new folder). A job without checkpoints runs in its own run folder (every other local test)."""
    (tmp_path / "train.py").write_text(WHERE)
    job = {"name": "where", "code": {"dir": ".", "entry": "train.py"}, "local": {"processes_per_node": 1}}

    def working_folder(**more: Any) -> tuple[str, str]:
        run = Job.from_dict({**job, **more}, base_dir=tmp_path).submit("local")
        assert run.wait(timeout=120, poll=0.3).state is RunState.SUCCEEDED
        found = re.search(r"cwd=(\S+) left=(\w+)", "\n".join(line.text for line in run.logs()))
        assert found, list(run.logs())
        return found.group(1), found.group(2)

    first, second = working_folder(checkpoint={"enabled": True}), working_folder(checkpoint={"enabled": True})
    assert first == (second[0], "False") == (first[0], second[1]), (first, second)
    assert "/runs/" not in first[0] and "/work/" in first[0]


def assert_a_named_variant_gets_its_own_folder(same: list[str]) -> None:
    """Plans only, after the first run: the same arguments resume with no warning; another ``--lr`` resumes in the
    same folder and says the arguments differ; with ``checkpoint.key`` it gets a folder of its own, empty; the
    clouds' checkpoint URIs follow the same rule."""
    plan = Job.load(DIGITS, same).render("local")
    assert any("resumes from ckpt-e0002" in d for d in plan.decisions), plan.decisions
    assert not any("arguments differ" in w for w in plan.warnings), plan.warnings
    other_lr = [*BASE, "code.args=[--dataset, digits, --epochs, '2', --lr, '0.05']"]
    unnamed = Job.load(DIGITS, other_lr).render("local")
    assert folder_of(unnamed) == folder_of(plan)  # the same training, as far as anything can tell: the plan says so
    assert any(
        "the arguments differ from those that wrote the checkpoint it will resume (was: train.py --dataset digits "
        "--epochs 2, now: train.py --dataset digits --epochs 2 --lr 0.05)" in w
        for w in unnamed.warnings
    ), unnamed.warnings
    named = Job.load(DIGITS, [*other_lr, "checkpoint.key=lr-0.05"]).render("local")
    assert folder_of(named) != folder_of(plan)
    assert any("no checkpoint yet" in d for d in named.decisions) and not named.warnings
    for backend, harness in (("sagemaker", SageMakerHarness), ("azureml", AzureMLHarness)):
        uris = [
            checkpoint_uri(Job.load(DIGITS, [*harness.overrides, *o]).render(backend))
            for o in (same, other_lr, [*other_lr, "checkpoint.key=lr-0.05"])
        ]
        assert uris[0] == uris[1] != uris[2], (backend, uris)


def folder_of(plan: Any) -> str:
    return str(plan.request.env["CLOUDDDP_CHECKPOINT_DIR"])


def checkpoint_uri(plan: Any) -> str:
    if plan.backend == "sagemaker":
        return str(plan.request["CheckpointConfig"]["S3Uri"])
    return str(plan.request["job"]["outputs"]["checkpoints"]["path"])
