"""``{{last_checkpoint:PATTERN}}`` at load: a pattern inside the checkpoint folder loads; an absolute one, one that
leaves the folder or none is an error with the spec's line (exit 2), and a misspelt name still gets the closest
known one. Render's part (checkpointing off, outside the arguments, what each backend sends):
tests/across_backends/test_last_checkpoint.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudddp.spec.placeholders import unknown
from tests.support.cli import cli

SPEC = """\
name: acc
code:
  dir: .
  entry: train.py
  args: [--output_dir, "{{checkpoint_dir}}", --resume_from_checkpoint, "ARG"]
checkpoint: {enabled: true}
"""


def spec_with(tmp_path: Path, arg: str) -> Path:
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC.replace("ARG", arg))
    (tmp_path / "train.py").write_text("")
    return spec


@pytest.mark.parametrize(
    "arg", ["{{last_checkpoint:step_*}}", "{{ last_checkpoint:checkpoints/checkpoint_* }}", "--r={{last_checkpoint:a}}"]
)
def test_a_pattern_inside_the_checkpoint_folder_loads(tmp_path: Path, arg: str) -> None:
    result = cli("validate", str(spec_with(tmp_path, arg)))
    assert result.returncode == 0, result.stderr
    assert unknown(arg) is None


@pytest.mark.parametrize(
    ("arg", "why"),
    [
        ("{{last_checkpoint:/ckpt/step_*}}", "'/ckpt/step_*' is absolute: the pattern is relative to the checkpoint"),
        ("{{last_checkpoint:../other/step_*}}", "'../other/step_*' leaves the checkpoint folder (..)"),
        ("{{last_checkpoint:out/../../x}}", "'out/../../x' leaves the checkpoint folder (..)"),
        ("{{last_checkpoint:}}", "names no pattern: give a glob relative to the checkpoint folder"),
    ],
)
def test_a_pattern_outside_the_checkpoint_folder_is_an_error_with_its_line(tmp_path: Path, arg: str, why: str) -> None:
    result = cli("validate", str(spec_with(tmp_path, arg)))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"job.yaml:5: code.args: {arg} in {arg!r}: {why}" in result.stderr, result.stderr


def test_a_misspelt_name_gets_the_closest_known_one_among_them_last_checkpoint(tmp_path: Path) -> None:
    result = cli("validate", str(spec_with(tmp_path, "{{last_chekpoint:step_*}}")))
    assert result.returncode == 2 and "job.yaml:5: code.args: unknown placeholder {{last_chekpoint:step_*}}" in (
        result.stderr
    )
    assert "did you mean {{last_checkpoint:PATTERN}}?" in result.stderr, result.stderr
    assert "did you mean {{last_checkpoint:PATTERN}}?" in (unknown("{{last_checkpoint}}") or "")
    world = unknown("{{world}}") or ""
    assert "did you mean {{world_size}}?" in world and world.endswith("{{inputs.NAME}}, {{last_checkpoint:PATTERN}}")
