"""``{{last_checkpoint:PATTERN}}`` as each rank's launcher expands it (cloudddp/injob/resume_arg.py): the newest
complete match by the numbers in the names when they differ only by numbers, else by modification time; ``""`` when
nothing matches or with ``checkpoint.resume: never``; a pattern that leaves the checkpoint folder refused; a save on
its way in (hidden, ``.tmp``, ``.partial``, an empty folder) never given to a script."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from cloudddp.injob import resume_arg
from cloudddp.injob.resume_arg import expand


def save(path: Path, when: float, *, folder: bool = True) -> Path:
    """A checkpoint at ``path`` (a folder holding a file, or a file) saved at ``when``."""
    if folder:
        path.mkdir(parents=True)
        (path / "model.bin").write_text("x")
        os.utime(path / "model.bin", (when, when))
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    os.utime(path, (when, when))
    return path


def test_the_numbers_in_the_names_order_matches_that_differ_only_by_numbers(tmp_path: Path) -> None:
    save(tmp_path / "step_9", 3e9)  # the newest by time, the oldest by step: the step wins
    save(tmp_path / "step_10", 2e9)
    save(tmp_path / "step_100", 1e9)
    argv, notes = expand(["train.py", "--resume_from_checkpoint", "{{last_checkpoint:step_*}}"], str(tmp_path))
    assert argv == ["train.py", "--resume_from_checkpoint", str(tmp_path / "step_100")]
    assert notes == [
        f"cloudddp: {{{{last_checkpoint:step_*}}}} = {tmp_path / 'step_100'} (the newest of 3, by the number in "
        "its name)"
    ]
    save(tmp_path / "out" / "epoch_2" / "ckpt.pt", 1e9, folder=False)  # files, deeper, by a pattern with a folder
    save(tmp_path / "out" / "epoch_11" / "ckpt.pt", 0.5e9, folder=False)
    argv, _ = expand(["{{last_checkpoint:out/epoch_*/ckpt.pt}}"], str(tmp_path))
    assert argv == [str(tmp_path / "out" / "epoch_11" / "ckpt.pt")]


def test_matches_that_differ_by_more_than_numbers_are_ordered_by_when_they_were_saved(tmp_path: Path) -> None:
    save(tmp_path / "ckpt_best", 1e9)
    old = save(tmp_path / "ckpt_last", 1e9)
    os.utime(old / "model.bin", (2e9, 2e9))  # the folder's own time is old: its newest file says when it was saved
    save(tmp_path / "ckpt_7", 1.5e9)
    argv, notes = expand(["--resume={{last_checkpoint:ckpt_*}}"], str(tmp_path))
    assert argv == [f"--resume={tmp_path / 'ckpt_last'}"]
    assert notes[0].endswith("(the newest of 3, by modification time)")


def test_nothing_matching_gives_empty_text_and_checkpoint_resume_never_gives_it_always(tmp_path: Path) -> None:
    words = ["--resume_from_checkpoint", "{{last_checkpoint:step_*}}", "--at={{last_checkpoint:step_*}}", "--n", "3"]
    argv, notes = expand(words, str(tmp_path))
    assert argv == ["--resume_from_checkpoint", "", "--at=", "--n", "3"]
    assert notes == [
        f"cloudddp: {{{{last_checkpoint:step_*}}}} is empty: nothing in {tmp_path} matches step_* yet (a first "
        "run; or the script saves under other names)"
    ], "one note per pattern"
    save(tmp_path / "step_20", 1e9)
    assert expand(words, str(tmp_path))[0][1] == str(tmp_path / "step_20")
    argv, notes = expand(words, str(tmp_path), never=True)
    assert argv[1] == "" and "checkpoint.resume is never" in notes[0]


def test_a_save_on_its_way_in_is_never_chosen(tmp_path: Path) -> None:
    save(tmp_path / "step_40", 1e9)
    save(tmp_path / "step_50.tmp", 2e9)
    save(tmp_path / "step_60.partial", 2e9)
    save(tmp_path / ".step_70", 2e9)
    (tmp_path / "step_80").mkdir()  # made, nothing written into it yet
    save(tmp_path / "step_90" / ".model.bin.part", 2e9, folder=False)  # only a hidden file in it
    argv, notes = expand(["{{last_checkpoint:step_*}}"], str(tmp_path))
    assert argv == [str(tmp_path / "step_40")] and "the newest of 1," in notes[0], notes
    (tmp_path / "step_90" / ".model.bin.part").rename(tmp_path / "step_90" / "other")
    argv, _ = expand(["{{last_checkpoint:.step_*}}"], str(tmp_path))  # a hidden name, even asked for by name
    assert argv == [""]
    argv, _ = expand(["{{last_checkpoint:step_*}}"], str(tmp_path))
    assert argv == [str(tmp_path / "step_90")]


@pytest.mark.parametrize("pattern", ["../other/step_*", "out/../../step_*", "/ckpt/step_*", "~/step_*", ".."])
def test_a_pattern_that_leaves_the_checkpoint_folder_is_refused(tmp_path: Path, pattern: str) -> None:
    (tmp_path / "inner").mkdir()
    save(tmp_path / "other" / "step_1", 1e9)
    with pytest.raises(ValueError, match=r"leaves the checkpoint folder|is absolute"):
        expand([f"{{{{last_checkpoint:{pattern}}}}}"], str(tmp_path / "inner"))


def test_the_launcher_prints_what_each_rank_is_given_and_stops_with_the_reason_when_it_cannot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save(tmp_path / "step_3", 1e9)
    env = {"CLOUDDDP_CHECKPOINT_DIR": str(tmp_path), "CLOUDDDP_RESUME": "auto"}
    assert resume_arg.launch(["a", "{{last_checkpoint:step_*}}", 3], env) == ["a", str(tmp_path / "step_3"), "3"]
    assert f"{{{{last_checkpoint:step_*}}}} = {tmp_path / 'step_3'}" in capsys.readouterr().err
    assert resume_arg.launch(["{{last_checkpoint:step_*}}"], {**env, "CLOUDDDP_RESUME": "never"}) == [""]
    with pytest.raises(SystemExit, match=r"_cloudddp_resume_arg\.py: .*needs checkpointing on"):
        resume_arg.launch(["{{last_checkpoint:step_*}}"], {})
    with pytest.raises(SystemExit, match="is absolute"):
        resume_arg.launch(["{{last_checkpoint:/x}}"], env)
    assert resume_arg.launch(["${{last_checkpoint:x}}", "{{nodes}}"], {}) == ["${{last_checkpoint:x}}", "{{nodes}}"]


def test_it_runs_as_the_file_shipped_beside_the_launcher(tmp_path: Path) -> None:
    """Loaded by its path under its shipped name, as the launcher loads it in an image without cloudddp."""
    shipped = tmp_path / resume_arg.SHIPPED_AS
    shipped.write_bytes(Path(resume_arg.__file__).read_bytes())
    spec = importlib.util.spec_from_file_location(shipped.stem, shipped)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    save(tmp_path / "ckpt" / "step_2", 1e9)
    assert module.expand(["{{last_checkpoint:step_*}}"], str(tmp_path / "ckpt"))[0] == [str(tmp_path / "ckpt/step_2")]
