"""A training keeps its checkpoint folder when only its arguments or its size change, and the plan says truthfully
what a run will resume from there (for any script) and when the arguments differ from those that wrote it.

The folder's rule (name, program, ``checkpoint.key``) on every backend; the resume note and the arguments warning
from folders laid out as the shared script, kept files and the frameworks leave them. The real resubmits:
tests/backends/local/test_resubmit_resumes.py."""

from __future__ import annotations

import json
import os
import re
import shlex
import time
from pathlib import Path
from typing import Any

import pytest

from cloudddp.api import Job
from cloudddp.backends.checkpoints import contents
from cloudddp.backends.plugins import spec_from_dict
from cloudddp.errors import SpecError
from cloudddp.plan import Plan
from cloudddp.runs.runner import get_backend
from cloudddp.runtime import checkpoint_folder, checkpoint_key
from tests.support.cli import FIXTURES, ROOT, cli
from tests.support.harnesses import AzureMLHarness, SageMakerHarness

TINY = FIXTURES / "tinyjob" / "job.yaml"

BASE: dict[str, Any] = {"name": "tr", "code": {"dir": ".", "entry": "train.py", "args": ["--lr", "0.1"]}}


def key(**changes: Any) -> str:
    data = json.loads(json.dumps(BASE))
    for dotted, value in changes.items():
        section, field = dotted.split("__")
        data.setdefault(section, {})[field] = value
    return checkpoint_key(spec_from_dict(data))


def test_arguments_inputs_environment_and_size_do_not_move_the_folder() -> None:
    same = key()
    assert key(code__args=["--lr", "0.1", "--resume_from_checkpoint", "out/checkpoint-40"]) == same
    assert key(code__args=[]) == same
    assert key(resources__nodes=4, resources__gpus_per_node=8) == same
    assert key(resources__processes_per_node=3) == same
    assert key(local__nodes=2, local__processes_per_node=1) == same
    assert key(env__SEED="3") == same
    assert key(inputs__data={"path": "s3://b/data/", "arg": "--data-dir"}) == same


def test_the_name_the_program_and_the_key_name_another_training() -> None:
    same = key()
    variant = spec_from_dict({**BASE, "name": "tr-lr05"})
    assert checkpoint_folder(variant, "/c") == f"/c/tr-lr05/{same}" != f"/c/tr/{same}"
    assert checkpoint_folder(spec_from_dict({**BASE, "checkpoint": {"path": "/mine"}}), "/c") == "/mine"
    assert key(code__entry="other.py") != same
    assert key(checkpoint__key="lr-0.05") != same != key(checkpoint__key="lr-0.01")
    assert key(checkpoint__key="lr-0.05") == key(checkpoint__key="lr-0.05", code__args=["--lr", "0.05"])


def command_key(*command: str) -> str:
    return checkpoint_key(spec_from_dict({"name": "tr", "code": {"dir": ".", "entry": None, "command": command}}))


def test_a_commands_options_and_overrides_do_not_move_the_folder_its_program_does() -> None:
    launch = command_key("accelerate", "launch", "train.py")
    assert command_key("accelerate", "launch", "train.py", "--lr", "0.1") == launch
    assert command_key("accelerate", "launch", "train.py", "trainer.num_nodes=2") == launch
    assert command_key("accelerate", "launch", "other.py", "--lr", "0.1") != launch


@pytest.mark.parametrize("bad", ["", "a/b", "../x", "lr 0.05", "x" * 65, "ключ"])
def test_a_checkpoint_key_that_is_not_a_short_safe_name_is_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(SpecError, match=re.escape("is not a short safe name: use letters, digits")):
        spec_from_dict({"name": "x", "checkpoint": {"key": bad}})
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: x\ncheckpoint:\n  key: {json.dumps(bad)}\n")
    result = cli("validate", str(spec), timeout=60)
    assert result.returncode == 2 and "job.yaml:3: checkpoint.key: " in result.stderr, result.stderr


def _folder_given(plan: Plan[Any]) -> str:
    """The checkpoint folder the job is given on its backend: SageMaker's ``CheckpointConfig``, Azure ML's
    checkpoints output, the Slurm script's ``export``, the local run's environment."""
    if plan.backend == "sagemaker":
        return str(plan.request["CheckpointConfig"]["S3Uri"])
    if plan.backend == "azureml":
        return str(plan.request["job"]["outputs"]["checkpoints"]["path"])
    if plan.backend == "slurm":
        exported = re.search(r"^export CLOUDDDP_CHECKPOINT_DIR=(.+)$", plan.documents["job.sbatch"], re.MULTILINE)
        assert exported is not None, plan.documents["job.sbatch"]
        return shlex.split(exported[1])[0]
    return str(plan.request.env["CLOUDDDP_CHECKPOINT_DIR"])


@pytest.mark.parametrize(
    ("backend", "settings"),
    [("local", []), ("sagemaker", SageMakerHarness.overrides), ("azureml", AzureMLHarness.overrides), ("slurm", [])],
)
def test_every_backend_keeps_the_folder_across_arguments_and_sizes_and_a_named_variant_gets_its_own(
    backend: str, settings: list[str]
) -> None:
    plans = [
        Job.load(TINY, [*settings, *more]).render(backend)
        for more in ([], ["code.args=[--epochs, '9', --resume, last]", "resources.nodes=2"], ["checkpoint.key=b"])
    ]
    folders = [_folder_given(plan) for plan in plans]
    assert folders[0] == folders[1] != folders[2], folders
    assert [str(plan.target.checkpoints).rstrip("/") for plan in plans] == [f.rstrip("/") for f in folders]  # carried
    line = next(d for d in plans[2].decisions if d.startswith("checkpoints in"))
    assert "(the training tiny running train.py, checkpoint.key b: arguments and size do not move it)" in line


def local_plan(*overrides: str) -> Plan[Any]:
    return Job.load(TINY, ["checkpoint.resume=auto", *overrides]).render("local")


def slurm_plan(*overrides: str) -> Plan[Any]:
    return get_backend("slurm", token="t1").render(Job.load(TINY, ["checkpoint.resume=auto", *overrides]).spec)


def folder_of(plan: Plan[Any]) -> Path:
    return Path(plan.request.env["CLOUDDDP_CHECKPOINT_DIR"])


def note(plan: Plan[Any]) -> str:
    return next(d for d in plan.decisions if d.startswith("checkpoints in"))


def touch(path: Path, when: float, text: str = "x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, (when, when))


def saved(when: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))


def test_an_own_scripts_framework_checkpoints_are_named_never_called_a_fresh_start(tmp_path: Path) -> None:
    plan = local_plan()
    assert "no checkpoint yet: starts from scratch" in note(plan)
    folder = folder_of(plan)
    touch(folder / ".cloudddp.lock", 1e9)  # cloudddp's own files are not checkpoints
    touch(folder / contents.RECORD, 1e9, "")
    assert "no checkpoint yet: starts from scratch" in note(local_plan())
    touch(folder / "out" / "checkpoint-20" / "trainer_state.json", 1.0e9)
    touch(folder / "out" / "checkpoint-40" / "trainer_state.json", 1.1e9)
    touch(folder / "out" / "checkpoint-40" / "model.safetensors", 1.1e9)
    said = note(local_plan())
    assert (
        "found out/checkpoint-40/, out/checkpoint-20/ (saved " in said and "your script resumes if it loads it" in said
    )
    assert "starts from scratch" not in said and "model.safetensors" not in said
    touch(folder / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt", 1.2e9)
    touch(folder / "acc" / "state" / "random_states_0.pkl", 1.3e9)
    touch(folder / "acc" / "project" / "checkpoints" / "checkpoint_3" / "optimizer.bin", 1.05e9)
    said = note(local_plan())
    assert "found acc/state/, lightning_logs/version_0/checkpoints/last.ckpt, out/checkpoint-40/ and 2 more" in said


def test_an_empty_folder_names_the_jobs_other_folders_that_hold_checkpoints_and_how_to_continue_one() -> None:
    folder = folder_of(local_plan())
    old = folder.parent / "0123456789ab"  # a folder keyed by the arguments' digest
    touch(old / "ckpt-e0003-s000120.pt", 1.2e9)
    touch(folder.parent / "fedcba987654" / contents.RECORD, 1.3e9, "")  # a record alone is not a checkpoint
    said = note(local_plan())
    assert f"other folders of this job hold checkpoints ({old}:" in said and "set checkpoint.path to it" in said
    assert "fedcba987654" not in said
    assert "other folders" not in note(local_plan(f"checkpoint.path={folder}"))  # a path the user named: no guess
    assert "other folders" not in note(local_plan("checkpoint.key=v2"))  # a named variant: its siblings are others'
    touch(folder / "last.pt", 1.4e9)
    assert "other folders" not in note(local_plan())


def test_an_own_scripts_other_files_and_the_shared_scripts_checkpoints_are_told_apart(tmp_path: Path) -> None:
    folder = folder_of(local_plan())
    touch(folder / "last.pt", 1e9)  # what the init template saves
    touch(folder / "ckpt-e0002-s0000000.pt", 1e9)
    touch(folder / "ckpt-e0002-s0000000.pt.sha256", 1e9)
    own = note(local_plan())
    assert "the checkpoint folder holds ckpt-e0002-s0000000.pt, ckpt-e0002-s0000000.pt.sha256, last.pt" in own
    assert "resumes from ckpt" not in own  # only the shared script reads those names
    shared = Job.load(ROOT / "jobs" / "digits-local.yaml", ["checkpoint.resume=auto"])
    touch(folder_of(shared.render("local")) / "ckpt-e0002-s0000000.pt", 1e9)
    touch(folder_of(shared.render("local")) / "ckpt-e0002-s0000000.pt.sha256", 1e9)
    assert note(shared.render("local")).endswith(
        "resumes from ckpt-e0002-s0000000.pt; held by one run at a time "
        "(a second copy of the training refuses to start while this one runs: .cloudddp.lock in the folder)"
    )


def test_kept_files_are_named_with_their_save_time_and_never_resume_removes_them(tmp_path: Path) -> None:
    folder = folder_of(local_plan("checkpoint.files=[snapshot.pt, /abs/state.json]"))
    touch(folder / "files" / "snapshot.pt", 1.0e9)
    touch(folder / "files" / "_root" / "abs" / "state.json", 1.1e9)
    touch(folder / "files" / ".snapshot.pt.a1b2", 1.2e9)  # a copy on its way in
    said = note(local_plan("checkpoint.files=[snapshot.pt, /abs/state.json]"))
    assert (
        f"kept files /abs/state.json, snapshot.pt (saved {saved(1.1e9)}) are linked back first: your script resumes "
        "if it loads them" in said
    )
    assert "resumes:" not in said  # only a script that loads them resumes
    never = note(local_plan("checkpoint.files=[snapshot.pt]", "checkpoint.resume=never"))
    assert "starts from scratch (checkpoint.resume: never; the kept files are removed first)" in never
    undeclared = note(local_plan())  # nothing links them back: files like any other
    assert (
        "linked back" not in undeclared and "holds files/_root/abs/state.json, files/snapshot.pt (saved" in undeclared
    )
    touch(folder / "last.ckpt", 1e9)
    never = note(local_plan("checkpoint.resume=never"))
    assert never.startswith(f"checkpoints in {folder} (") and (
        "starts from scratch (checkpoint.resume: never): the folder holds last.ckpt, files/_root/abs/state.json, "
        "files/snapshot.pt, which your script loads unless it heeds CLOUDDDP_RESUME=never" in never
    ), never


def record(folder: Path, started: float, *argv: str) -> None:
    with (folder / contents.RECORD).open("ab") as f:
        f.write(contents.record_line("r", argv, started))


def test_the_plan_warns_when_the_arguments_differ_from_those_that_wrote_the_checkpoint(tmp_path: Path) -> None:
    plan = local_plan()
    folder = folder_of(plan)
    folder.mkdir(parents=True)
    record(folder, 100.0, "train.py", "--epochs", "3")
    touch(folder / "last.pt", 200.0)
    record(folder, 300.0, "train.py", "--epochs", "3", "--lr", "0.5")  # started, wrote nothing
    assert not local_plan().warnings  # the run that wrote last.pt had these arguments
    warned = local_plan("code.args=[--epochs, '6']").warnings
    assert any(
        "the arguments differ from those that wrote the checkpoint it will resume "
        "(was: train.py --epochs 3, now: train.py --epochs 6)" in w
        for w in warned
    ), warned
    touch(folder / "last.pt", 400.0)  # now written by the run started at 300
    warned = local_plan().warnings
    assert any("(was: train.py --epochs 3 --lr 0.5, now: train.py --epochs 3)" in w for w in warned), warned
    assert not local_plan("checkpoint.resume=never").warnings  # nothing is resumed


def test_slurm_reads_the_folder_only_where_it_is_this_machines(tmp_path: Path) -> None:
    plan = slurm_plan(f"slurm.workdir={tmp_path}")
    assert "no checkpoint yet: starts from scratch" in note(plan), plan.decisions
    folder = Path(plan.request.checkpoint_dir)
    assert folder.is_relative_to(tmp_path)
    touch(folder / "last.ckpt", 200.0)
    record(folder, 100.0, "train.py", "--epochs", "2")
    plan = slurm_plan(f"slurm.workdir={tmp_path}")
    assert f"found last.ckpt (saved {saved(200.0)}) in the checkpoint folder" in note(plan), plan.decisions
    assert any("(was: train.py --epochs 2, now: train.py --epochs 3)" in w for w in plan.warnings), plan.warnings
    remote = slurm_plan(f"slurm.workdir={tmp_path}", "slurm.login_host=login1")
    assert "(on the cluster: not read at render)" in note(remote) and "last.ckpt" not in note(remote)
    assert not any("arguments differ" in w for w in remote.warnings)


def test_a_launch_records_its_arguments_beside_the_checkpoints(tmp_path: Path) -> None:
    folder = tmp_path / "ck"
    folder.mkdir()
    contents.record_run(folder, "run-1", ["train.py", "--lr", "0.1"])
    contents.record_run(folder, "run-2", ["train.py", "it's"])
    lines = [json.loads(line) for line in (folder / contents.RECORD).read_text().splitlines()]
    assert [(d["run_id"], d["argv"]) for d in lines] == [
        ("run-1", ["train.py", "--lr", "0.1"]),
        ("run-2", ["train.py", "it's"]),
    ]
    assert contents.look(folder, shared_script=False, keeps=False).runs[1][1] == ("train.py", "it's")


def test_a_slurm_submit_records_its_arguments_in_the_checkpoint_folder_through_its_shell(tmp_path: Path) -> None:
    from cloudddp.backends.slurm import launch as slurm_launch
    from cloudddp.backends.slurm.shell import Shell

    request = slurm_plan(f"slurm.workdir={tmp_path}", "code.args=[--epochs, 'a b']").request
    folder = Path(request.checkpoint_dir)
    folder.mkdir(parents=True)
    slurm_launch._record(Shell(None, ()), request, 123.0)
    assert contents.look(folder, shared_script=False, keeps=False).runs == ((123.0, ("train.py", "--epochs", "a b")),)
