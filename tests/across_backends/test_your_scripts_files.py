"""Your own script's progress: ``checkpoint.files`` makes the files it saves and loads itself resolve into the
training's checkpoint folder (so a resubmit resumes), the plan says what makes a resubmit resume, and a run that
left files in its working folder (discarded with it) names them at its end with the fix."""

from __future__ import annotations

import errno
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.plugins import spec_from_dict
from cloudddp.backends.status import RunState
from cloudddp.errors import SpecError
from cloudddp.injob import keepfiles
from cloudddp.injob.keepfiles import Keeper, left_behind_notice, matches
from cloudddp.injob.mpi_env import mpi_environment
from tests.support.cli import ROOT
from tests.support.own_saver import saved_epochs, saver_code
from tests.support.slurm_cluster import SlurmCluster

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
    fix = "resumes only if your script writes to $CLOUDDDP_CHECKPOINT_DIR (or {{checkpoint_dir}} in code.args)"
    assert any(fix in d for d in own.decisions), own.decisions
    told = Job.load(ROOT / "examples" / "huggingface" / "job.yaml").render("local")
    assert any("your script is given the checkpoint folder ({{checkpoint_dir}})" in d for d in told.decisions)
    shared = Job.load(ROOT / "jobs" / "digits-local.yaml").render("local")
    assert not any("your script" in d or "checkpoint.files" in d for d in shared.decisions)  # it checkpoints itself
    kept = Job.from_dict(
        {"name": "saver", "code": {"dir": ".", "entry": "train.py"}, "checkpoint": {"files": ["snapshot.pt"]}},
        base_dir=tmp_path,
    ).render("local")
    assert any("checkpoint.files (snapshot.pt): before the program starts, on every node" in d for d in kept.decisions)
    assert not any("resumes only if" in d for d in kept.decisions)


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (["../elsewhere.pt"], "'..' is not allowed"),
        (["state/"], "is a folder: declare the files in it, e.g. 'state/**'"),
        ([""], "is not a file's path"),
        (["a.pt", "a.pt"], "'a.pt' is declared twice"),
        (["_cloudddp_launch.py"], "a file cloudddp ships with the code"),
    ],
)
def test_a_checkpoint_file_that_cannot_be_kept_is_refused_with_the_reason(files: list[str], message: str) -> None:
    with pytest.raises(SpecError, match=re.escape(message)):
        spec_from_dict({"name": "x", "checkpoint": {"files": files}})


def test_checkpoint_files_need_checkpointing_on() -> None:
    with pytest.raises(SpecError, match="kept in the checkpoint folder: set `enabled: true`"):
        spec_from_dict({"name": "x", "checkpoint": {"enabled": False, "files": ["snapshot.pt"]}})


def test_a_declared_file_resolves_into_the_checkpoint_folder_and_the_next_run_finds_it(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    first = tmp_path / "run1"
    first.mkdir()
    assert Keeper(["snapshot.pt"], first, ckpt).link() == []
    link = first / "snapshot.pt"
    assert link.is_symlink() and not link.exists()  # dangling: the script's os.path.exists says "start afresh"
    link.write_bytes(b"epoch 1")  # the script's own save, through the link
    assert (ckpt / "files" / "snapshot.pt").read_bytes() == b"epoch 1"
    second = tmp_path / "run2"
    second.mkdir()
    Keeper(["snapshot.pt"], second, ckpt).link()
    assert (second / "snapshot.pt").read_bytes() == b"epoch 1"  # a resubmit's fresh working folder loads it


def test_an_absolute_path_is_kept_under_root(tmp_path: Path) -> None:
    keeper = Keeper([str(tmp_path / "elsewhere" / "state.bin")], tmp_path / "work", tmp_path / "ckpt")
    assert keeper.kept_copy(tmp_path / "elsewhere" / "state.bin") == (
        tmp_path / "ckpt" / "files" / "_root" / (tmp_path / "elsewhere" / "state.bin").relative_to("/")
    )


def test_a_file_renamed_over_its_link_is_saved_at_once_one_written_in_place_once_settled_and_all_at_the_end(
    tmp_path: Path,
) -> None:
    work, ckpt = tmp_path / "work", tmp_path / "ckpt"
    work.mkdir()
    keeper = Keeper(["snapshot.pt"], work, ckpt)
    keeper.link()
    (work / "snapshot.pt.tmp").write_bytes(b"epoch 2")
    os.replace(work / "snapshot.pt.tmp", work / "snapshot.pt")  # replaces the link with a plain file
    assert not (work / "snapshot.pt").is_symlink()
    assert keeper.save() == [str(work / "snapshot.pt")]  # a new inode where the link was, open nowhere: whole
    assert (ckpt / "files" / "snapshot.pt").read_bytes() == b"epoch 2"
    (work / "snapshot.pt").write_bytes(b"epoch 3, in place")  # the same inode, which a writer may still hold
    assert keeper.save() == []  # first look at this version: it may still be changing
    assert keeper.save() == [str(work / "snapshot.pt")]  # unchanged since: saved
    assert (ckpt / "files" / "snapshot.pt").read_bytes() == b"epoch 3, in place"
    (work / "snapshot.pt").write_bytes(b"epoch 4!")
    assert keeper.save(final=True) == [str(work / "snapshot.pt")]  # the program ended: saved at once
    assert (ckpt / "files" / "snapshot.pt").read_bytes() == b"epoch 4!"
    assert keeper.save(final=True) == []  # the same bytes are not copied again
    assert not [p for p in (ckpt / "files").iterdir() if p.name.startswith(".")]  # no temporary copy left


def test_a_pattern_links_the_kept_files_and_saves_new_ones(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    (ckpt / "files" / "state" / "deep").mkdir(parents=True)
    (ckpt / "files" / "state" / "a.json").write_text("a")
    (ckpt / "files" / "state" / "deep" / "b.json").write_text("b")
    work = tmp_path / "work"
    work.mkdir()
    keeper = Keeper(["state/*.json", "logs/**/*.txt"], work, ckpt)
    keeper.link()
    assert (work / "state" / "a.json").is_symlink() and (work / "state" / "a.json").read_text() == "a"
    assert not (work / "state" / "deep" / "b.json").exists()  # `*` stays in one folder
    (work / "state" / "new.json").write_text("new")
    (work / "logs" / "x").mkdir(parents=True)
    (work / "logs" / "x" / "l.txt").write_text("log")
    saved = keeper.save(final=True)
    assert sorted(saved) == [str(work / "logs" / "x" / "l.txt"), str(work / "state" / "new.json")]
    assert (ckpt / "files" / "logs" / "x" / "l.txt").read_text() == "log"
    assert matches(["state/*.json"], "state/new.json") and not matches(["state/*.json"], "state/deep/b.json")
    assert matches(["logs/**/*.txt"], "logs/x/l.txt") and matches(["./snapshot.pt"], "snapshot.pt")


def test_a_kept_file_the_script_deletes_leaves_the_kept_set_as_a_frameworks_rotation_expects(tmp_path: Path) -> None:
    """Lightning's ``save_top_k`` and Hugging Face's ``save_total_limit`` delete old checkpoints: the kept copies
    follow, so the next run is not handed back every checkpoint ever written (and nothing the script still has,
    or never saw, is touched)."""
    ckpt, work = tmp_path / "ckpt", tmp_path / "work"
    (ckpt / "files" / "out" / "checkpoint-1").mkdir(parents=True)
    (ckpt / "files" / "out" / "checkpoint-1" / "model.pt").write_text("1")
    (ckpt / "files" / "out" / "checkpoint-1" / "trainer_state.json").write_text("{}")
    (ckpt / "files" / "other.txt").write_text("not declared")
    work.mkdir()
    keeper = Keeper(["out/**", "last.ckpt"], work, ckpt)
    keeper.link()
    (work / "out" / "checkpoint-2").mkdir()
    (work / "out" / "checkpoint-2" / "model.pt").write_text("2")
    keeper.save(final=True)
    assert (ckpt / "files" / "out" / "checkpoint-2" / "model.pt").read_text() == "2"
    shutil.rmtree(work / "out" / "checkpoint-1")  # save_total_limit=1: the older folder goes
    (work / "last.ckpt").unlink()  # a link to a kept copy that does not exist yet: nothing to remove
    keeper.save()
    assert not (ckpt / "files" / "out" / "checkpoint-1").exists(), "the deleted folder's kept copies are gone"
    assert (ckpt / "files" / "out" / "checkpoint-2" / "model.pt").read_text() == "2"
    assert (ckpt / "files" / "other.txt").exists(), "a kept file this run never saw is left alone"
    fresh = tmp_path / "work2"
    fresh.mkdir()
    Keeper(["out/**"], fresh, ckpt).link()
    assert sorted(p.name for p in (fresh / "out").iterdir()) == ["checkpoint-2"]


def test_where_no_link_can_be_made_the_file_is_copied_in_and_saved_back_and_it_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt, work = tmp_path / "ckpt", tmp_path / "work"
    (ckpt / "files").mkdir(parents=True)
    (ckpt / "files" / "snapshot.pt").write_bytes(b"epoch 4")
    work.mkdir()

    def refuse(*_: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(keepfiles.os, "symlink", refuse)  # a filesystem without symbolic links
    keeper = Keeper(["snapshot.pt"], work, ckpt)
    [note] = keeper.link()
    assert "snapshot.pt cannot be a link to" in note and "Operation not permitted" in note and "copied in" in note
    assert (work / "snapshot.pt").read_bytes() == b"epoch 4"
    (work / "snapshot.pt").write_bytes(b"epoch 5")
    keeper.save(final=True)
    assert (ckpt / "files" / "snapshot.pt").read_bytes() == b"epoch 5"


def test_resume_never_starts_afresh_and_the_newer_of_a_left_file_and_its_kept_copy_wins(tmp_path: Path) -> None:
    ckpt, work = tmp_path / "ckpt", tmp_path / "work"
    (ckpt / "files").mkdir(parents=True)
    (ckpt / "files" / "snapshot.pt").write_bytes(b"old")
    work.mkdir()
    (work / "snapshot.pt").write_bytes(b"newer, left by a requeued start in this folder")
    os.utime(ckpt / "files" / "snapshot.pt", (1, 1))
    Keeper(["snapshot.pt"], work, ckpt).link()
    assert (work / "snapshot.pt").is_symlink() and (work / "snapshot.pt").read_bytes().startswith(b"newer")
    Keeper(["snapshot.pt"], work, ckpt).link(fresh=True)
    assert not (work / "snapshot.pt").exists() and not (ckpt / "files" / "snapshot.pt").exists()


def test_the_left_behind_notice_names_the_files_and_the_fix() -> None:
    assert left_behind_notice(["snapshot.pt"]) == (
        "snapshot.pt was written in the working directory and discarded with the run: add it to checkpoint.files"
    )
    assert left_behind_notice(["a", "b"]).startswith("a, b were written")


def test_under_sagemakers_mpi_runner_the_master_is_the_first_host() -> None:
    ompi = {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    derived = mpi_environment({**ompi, "SM_HOSTS": '["algo-1", "algo-2"]'})
    assert derived["MASTER_ADDR"] == "algo-1" and derived["LOCAL_WORLD_SIZE"] == "2" and derived["RANK"] == "2"


def test_every_backend_hands_the_declared_files_to_its_launcher(tmp_path: Path) -> None:
    from tests.support.harnesses import AzureMLHarness, SageMakerHarness

    code = saver_code(tmp_path)
    spec = {"name": "keeper", "code": {"dir": str(code)}, "checkpoint": {"files": ["snapshot.pt", "state/*.json"]}}
    local = Job.from_dict(spec, base_dir=tmp_path).render("local")
    assert list(local.request.keep_files) == ["snapshot.pt", "state/*.json"]
    assert "python -m cloudddp.injob.keepfiles link snapshot.pt 'state/*.json'" in local.documents["torchrun.sh"]
    slurm = Job.from_dict({**spec, "slurm": {"python": "python3"}}, base_dir=tmp_path).render("slurm")
    script = slurm.documents["job.sbatch"]
    assert (
        "_cloudddp_launch.py" in script and """'{"stops":"platform","keep":["snapshot.pt","state/*.json"]}'""" in script
    )
    import json

    (tmp_path / "job.yaml").write_text(json.dumps(spec))
    az = Job.load(tmp_path / "job.yaml", AzureMLHarness.overrides).render("azureml")
    assert '"keep":["snapshot.pt","state/*.json"]' in az.request["job"]["command"]
    sm = Job.load(tmp_path / "job.yaml", SageMakerHarness.overrides).render("sagemaker")
    from cloudddp.injob.shim import read_payload

    hp = sm.request["HyperParameters"]
    args = [a for key in sorted(hp) if key.startswith("cloudddp-") for a in (f"--{key}", json.loads(hp[key]))]
    assert read_payload(args)["keep"] == ["snapshot.pt", "state/*.json"]


@pytest.mark.slow
def test_a_file_the_script_left_in_its_working_folder_is_named_at_the_end_with_the_fix(tmp_path: Path) -> None:
    run = own_job(tmp_path).submit("local")
    status = run.wait(timeout=120, poll=0.5)
    assert status.state is RunState.SUCCEEDED, status
    assert status.details["left_behind"] == ["snapshot.pt"]
    assert left_behind_notice(["snapshot.pt"]) in status.message
    assert not (tmp_path / "snapshot.pt").exists()  # the source folder is left alone


def _local_saver(folder: Path, *args: str) -> Job:
    return Job.from_dict(
        {
            "name": "keeper",
            "code": {"dir": str(saver_code(folder)), "entry": "train.py", "args": list(args)},
            # other arguments each time, so not the same training by its key: the folder is named
            "checkpoint": {"files": ["snapshot.pt"], "path": str(folder / "checkpoints")},
            "local": {"nodes": 2, "processes_per_node": 1},
        },
        base_dir=folder,
    )


@pytest.mark.slow
def test_locally_a_declared_snapshot_resumes_on_a_resubmit_also_when_renamed_over_its_link(tmp_path: Path) -> None:
    outputs = []
    for args in (["2"], ["2", "--atomic"], ["1"]):
        run = _local_saver(tmp_path, *args).submit("local")
        status = run.wait(timeout=180, poll=0.5)
        assert status.state is RunState.SUCCEEDED, status
        assert "left_behind" not in status.details, status.details  # declared: not named as discarded
        outputs.append("\n".join(line.text for line in run.logs()))
    assert saved_epochs(outputs[0]) == [0, 1] and "Resuming" not in outputs[0]
    assert "Resuming training from snapshot at Epoch 2" in outputs[1] and saved_epochs(outputs[1]) == [2, 3]
    assert "Resuming training from snapshot at Epoch 4" in outputs[2] and saved_epochs(outputs[2]) == [4]


@pytest.mark.slow
def test_on_slurm_under_srun_a_declared_snapshot_resumes_on_a_resubmit(
    slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """srun tasks (one per process, env:// from the variables the batch script sets) on the real 2-node rig."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    spec = {
        "name": "keeper",
        "code": {"dir": str(saver_code(tmp_path)), "entry": "train.py", "args": ["2"]},
        "checkpoint": {"files": ["snapshot.pt"]},
        "resources": {"nodes": 2, "processes_per_node": 1},
        "slurm": {"launch": "srun", "python": sys.executable, "kill_wait": 5},
    }
    outputs = []
    for _ in range(2):
        run = Job.from_dict(spec, base_dir=tmp_path).submit("slurm", poll_seconds=0.2)
        status = run.wait(timeout=180, poll=0.5)
        assert status.state is RunState.SUCCEEDED, status
        outputs.append("\n".join(line.text for line in run.logs()))
    assert saved_epochs(outputs[0]) == [0, 1] and "Resuming" not in outputs[0], outputs[0][-3000:]
    assert "Resuming training from snapshot at Epoch 2" in outputs[1] and saved_epochs(outputs[1]) == [2, 3]


def test_the_keeper_is_shipped_only_with_a_job_that_declares_files_and_packed_again_the_same(tmp_path: Path) -> None:
    from cloudddp.runtime import code_snapshot, packed, snapshot_upload

    code = saver_code(tmp_path)
    plain = spec_from_dict({"name": "plain", "code": {"dir": str(code)}}, base_dir=tmp_path)
    kept = spec_from_dict(
        {"name": "kept", "code": {"dir": str(code)}, "checkpoint": {"files": ["a"]}}, base_dir=tmp_path
    )
    assert keepfiles.SHIPPED_AS not in code_snapshot(plain).files
    snapshot = code_snapshot(kept)
    assert keepfiles.SHIPPED_AS in snapshot.files
    upload = {**snapshot_upload(kept, snapshot, "anywhere"), "path": str(tmp_path / "pruned.tar.gz")}
    assert packed(upload).name == f"{snapshot.sha256}.tar.gz"  # packed again from the folder: the same bytes


def test_the_keepers_command_line_links_and_saves_in_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("CLOUDDDP_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    assert keepfiles.main(["link", "snapshot.pt"]) == 0 and (work / "snapshot.pt").is_symlink()
    (work / "snapshot.pt").unlink()
    (work / "snapshot.pt").write_bytes(b"renamed over")
    assert keepfiles.main(["save", "snapshot.pt"]) == 0
    assert (tmp_path / "ckpt" / "files" / "snapshot.pt").read_bytes() == b"renamed over"
    assert "saved" in capsys.readouterr().out
    assert keepfiles.main(["unlink"]) == 2


def test_a_save_that_fails_is_said_and_tried_again_never_stopping_the_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    keeper = Keeper(["snapshot.pt"], work, tmp_path / "ckpt")
    keeper.link()
    (work / "snapshot.pt").unlink()
    (work / "snapshot.pt").write_bytes(b"renamed over")

    def full(*_: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(keepfiles, "_copy_atomic", full)
    assert keeper.save(final=True) == []
    assert "could not save" in capsys.readouterr().err
    monkeypatch.undo()
    assert keeper.save(final=True) == [str(work / "snapshot.pt")]  # the next look saves it
