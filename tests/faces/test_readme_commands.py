"""The README is the way in, so what it tells a newcomer to type works: every command of its quick start and of
its own-script walkthrough runs here, parsed from README.md itself (a changed README changes what runs), and the
script it shows is the one `cloudddp init` writes."""

from __future__ import annotations

import re
import shlex
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


@pytest.mark.slow
def test_every_quick_start_command_runs() -> None:
    argvs = commands("Quick start")
    assert any(argv[0] == "submit" for argv in argvs)
    outputs = run_all(argvs, ROOT)
    submitted = next(out for line, out in outputs.items() if line.startswith("cloudddp submit"))
    assert "succeeded" in submitted, submitted[-2000:]
    listed = next(out for line, out in outputs.items() if line.startswith("cloudddp list"))
    assert "succeeded" in listed and "digits-ddp" in listed, listed


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
