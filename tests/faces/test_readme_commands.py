"""The README is the way in, so what it tells a newcomer to type works: every command of its quick start and of
its own-script walkthrough runs here, parsed from README.md itself (a changed README changes what runs), and the
script it shows is the one `cloudddp init` writes."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import ROOT, cli

README = ROOT / "README.md"
TEMPLATE = ROOT / "cloudddp" / "data" / "train_template.py"


def section(title: str) -> str:
    text = README.read_text()
    assert f"\n## {title}\n" in text, f"the README has no section {title!r}"
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def commands(title: str) -> list[list[str]]:
    """The `$ cloudddp …` lines of a section's console blocks, as argv after `cloudddp` (comments dropped)."""
    lines = [line[2:] for block in blocks(section(title), "console") for line in block.splitlines()]
    argvs = [shlex.split(line, comments=True) for line in lines]
    assert argvs and all(argv[0] == "cloudddp" for argv in argvs), argvs
    return [argv[1:] for argv in argvs]


def run_all(argvs: list[list[str]], cwd: Path) -> dict[str, str]:
    """Run each command as a user would, in order; each must succeed. Returns each command's output."""
    outputs = {}
    for argv in argvs:
        result = cli(*argv, cwd=cwd, timeout=300)
        line = shlex.join(["cloudddp", *argv])
        assert result.returncode == 0, f"{line}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
        assert "Traceback" not in result.stderr, f"{line}\n{result.stderr[-2000:]}"
        outputs[line] = result.stdout + result.stderr
    return outputs


def test_the_readme_is_at_most_250_lines_and_every_link_between_the_pages_resolves() -> None:
    assert README.read_text().count("\n") <= 250
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
    dead = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            path = (page.parent / target).resolve()
            if not path.exists():
                dead.append(f"{page.relative_to(ROOT)}: {target}")
    assert not dead, dead


def shell_lines(title: str) -> list[str]:
    """The `$ …` lines of a section's console blocks, as typed (comments dropped)."""
    lines = [line[2:] for block in blocks(section(title), "console") for line in block.splitlines()]
    return [shlex.join(shlex.split(line, comments=True)) for line in lines]


DEMO_LINE = "make demo"
VENV = ROOT / ".venv"  # the Makefile's VENV: the folder `make demo` makes and `make test` runs in
BARE_PATH = "/usr/local/bin:/usr/bin:/bin"  # a fresh shell's PATH: no cloudddp on it


def test_make_demo_says_how_to_reach_cloudddp_the_way_the_readme_does() -> None:
    lines = shell_lines("Quick start")
    assert lines[:2] == [DEMO_LINE, ". .venv/bin/activate"], lines
    dry = subprocess.run(["make", "-n", "demo"], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert ".venv/bin/cloudddp submit jobs/digits-local.yaml" in dry, dry
    assert "'. .venv/bin/activate' puts it on your PATH" in dry, dry


@pytest.mark.slow
def test_the_quick_start_runs_as_written_in_one_shell_after_make_demo(tmp_path: Path) -> None:
    """Every quick-start line after `make demo`, in order, in one bash shell whose PATH has no `cloudddp` until the
    README's own line puts it there. `make demo` itself is skipped (a fresh virtual environment is minutes; the
    checkout's .venv is the one it makes): in place of its 12-epoch training, the same job runs one epoch with
    .venv's `cloudddp`, so `list`, `status` and `metrics` have the run the demo leaves."""
    lines = shell_lines("Quick start")
    assert lines[0] == DEMO_LINE
    assert (VENV / "bin" / "cloudddp").is_file(), "no .venv: run `make venv` (what `make demo` makes) first"
    env = {**os.environ, "PATH": BARE_PATH, "COLUMNS": "200"}
    bare = subprocess.run(["bash", "-c", "command -v cloudddp"], capture_output=True, text=True, env=env)
    assert bare.returncode != 0, f"cloudddp is on the bare PATH already: {bare.stdout}"
    one_epoch = ["code.args=[--dataset, digits, --model, cnn, --epochs, 1]"]
    demo = [str(VENV / "bin" / "cloudddp"), "submit", "jobs/digits-local.yaml", "-o", *one_epoch]
    seeded = subprocess.run(demo, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert "succeeded" in seeded.stdout + seeded.stderr, seeded.stderr[-2000:]
    script = "set -e\n" + "".join(f"echo '>>> {line}'\n{line}\n" for line in lines[1:])
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    outputs = dict(part.split("\n", 1) for part in result.stdout.split(">>> ")[1:])
    assert set(outputs) == set(lines[1:]), outputs.keys()
    listed = outputs["cloudddp list"]
    assert "succeeded" in listed and "digits-ddp" in listed, listed
    assert "TrainingJobName" in outputs["cloudddp render jobs/cifar10-resnet18.yaml -b sagemaker"]
    assert "#SBATCH" in outputs["cloudddp render jobs/cifar10-slurm.yaml -b slurm"]


@pytest.mark.slow
def test_every_own_script_walkthrough_command_runs_and_the_script_shown_is_the_one_init_writes(tmp_path: Path) -> None:
    title = "Your own script in five minutes"
    (shown,) = blocks(section(title), "python")
    assert shown == TEMPLATE.read_text()
    argvs = commands(title)
    outputs = run_all(argvs, tmp_path)
    assert (tmp_path / "my-project" / "train.py").read_text() == shown
    submitted = next(out for line, out in outputs.items() if line.startswith("cloudddp submit"))
    assert "succeeded" in submitted and "epoch 3" in submitted, submitted[-2000:]
    tail = next(out for line, out in outputs.items() if line.startswith("cloudddp logs"))
    assert '[rank0] CLOUDDDP_METRIC {"epoch": 3' in tail, tail
    assert (tmp_path / "my-model" / "src_train" / "ddptrain" / "user.py").is_file()


def test_a_spec_without_code_entry_whose_default_file_is_missing_says_the_line(tmp_path: Path) -> None:
    """The README promises a missing entry file is reported with its line: with no `code.entry` at all, the line
    is `code:`'s (the default train.py is what is missing)."""
    (tmp_path / "job.yaml").write_text("name: x\ncode:\n  dir: .\n")
    result = cli("validate", str(tmp_path / "job.yaml"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "job.yaml:2: code.entry: train.py is not a file" in result.stderr, result.stderr
