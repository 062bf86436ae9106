"""The rank launcher's line discipline (:class:`cloudddp.injob.output_lines.Lines`): whole lines out, a progress
bar's ``\\r`` updates as its latest state, a traceback behind a bar on a line of its own; and the launcher itself,
run for real with a tqdm script, writes nothing but whole lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cloudddp.injob.output_lines import TRACEBACK, Lines
from tests.support.waiting import LOADED


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fed(lines: Lines, *chunks: bytes) -> list[str]:
    return [line for chunk in chunks for line in lines.feed(chunk)] + lines.feed(b"", final=True)


def test_plain_lines_pass_whole_and_the_last_unfinished_one_comes_at_the_end() -> None:
    assert fed(Lines(), b"one\ntw", b"o\r\n", b"\n\r\nlast") == ["one\n", "two\n", "\n", "\n", "last\n"]


def test_a_bars_updates_collapse_to_its_last_state_on_one_line() -> None:
    updates = b"".join(b"\r%3d%%|%s| %d/100" % (i, "█".encode() * (i // 10), i) for i in range(101))
    assert fed(Lines(), b"epoch 1\n", updates, b"\n", b"done\n") == [
        "epoch 1\n",
        "100%|" + "█" * 10 + "| 100/100\n",
        "done\n",
    ]


def test_a_bar_that_clears_itself_leaves_no_line() -> None:
    assert fed(Lines(), b"\r 50%|#####", b"\r" + b" " * 11 + b"\r", b"after\n") == ["after\n"]


def test_a_multibyte_character_split_between_reads_is_not_garbled() -> None:
    bar = "\r 50%|█████".encode()
    assert fed(Lines(), bar[:7], bar[7:], b"\n") == [" 50%|█████\n"]


def test_a_running_bar_shows_its_state_every_interval_and_its_end_once() -> None:
    clock = Clock()
    lines = Lines(every=10, clock=clock)
    assert lines.feed(b"\r 10%") == [], "held: the bar may be rewritten at once"
    clock.now = 9.9
    assert lines.feed(b"\r 20%") == []
    clock.now = 10.0
    assert lines.feed(b"\r 30%") == [" 30%\n"]
    clock.now = 15.0
    assert lines.feed(b"\r 40%") == [], "shown 5 s ago"
    clock.now = 20.0
    assert lines.feed(b"") == [" 40%\n"], "quiet output: the held state is shown when due"
    assert lines.feed(b"\n") == [], "its last state is out already"
    assert lines.feed(b"\r 99%\n") == [" 99%\n"], "a new bar: shown at its end"


def test_a_traceback_printed_behind_a_bar_starts_a_line_of_its_own() -> None:
    out = fed(Lines(), b"\r 40%| 4/10", b"\r 50%| 5/10" + TRACEBACK.encode() + b"\n  File x\nRuntimeError: boom\n")
    assert out == [" 50%| 5/10\n", TRACEBACK + "\n", "  File x\n", "RuntimeError: boom\n"]


def test_a_line_rewritten_with_a_trailing_return_keeps_its_last_text() -> None:
    assert fed(Lines(), b"step 1\rstep 2\r", b"step 3\r") == ["step 3\n"]


def test_a_bar_that_never_ends_keeps_bounded_memory() -> None:
    lines = Lines()
    for i in range(20000):
        lines.feed(b"\r%d it" % i)
    assert len(lines.partial) < 20
    assert lines.feed(b"", final=True) == ["19999 it\n"]


TQDM_SCRIPT = """
import sys, time
from tqdm import tqdm
print("before", flush=True)
bar = tqdm(total=50, mininterval=0)
for _ in range(50):
    bar.update(1)
raise RuntimeError("boom behind the bar")
"""


def test_the_launcher_writes_a_tqdm_scripts_output_as_whole_lines(tmp_path: Path) -> None:
    script = tmp_path / "bar.py"
    script.write_text(TQDM_SCRIPT)
    launcher = [sys.executable, "-m", "cloudddp.injob.shim", "--cloudddp-00", json.dumps({}), "--"]
    done = subprocess.run([*launcher, sys.executable, str(script)], capture_output=True, text=True, timeout=LOADED)
    assert done.returncode == 1
    assert done.stdout == "before\n"
    errors = done.stderr.splitlines(keepends=True)
    assert "\r" not in done.stderr and all(line.endswith("\n") for line in errors), done.stderr
    bars = [line for line in errors if "/50" in line]
    assert bars and bars[0].startswith("100%|") and "50/50" in bars[0], errors
    assert errors[1] == TRACEBACK + "\n" and "RuntimeError: boom behind the bar\n" in errors[2:], errors


def test_a_program_whose_output_cannot_be_written_anywhere_still_runs_to_its_end(tmp_path: Path) -> None:
    """A launcher whose own output is gone drains the program's all the same: a full pipe would block it for good."""
    launcher = [sys.executable, "-m", "cloudddp.injob.shim", "--cloudddp-00", json.dumps({}), "--"]
    program = [sys.executable, "-c", "for i in range(300_000): print(i)"]
    child = subprocess.Popen([*launcher, *program], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert child.stdout is not None
    child.stdout.close()
    assert child.wait(timeout=LOADED) == 0  # a few seconds alone; a bound on the hang it guards against


def test_the_launcher_and_the_snapshot_name_the_shipped_line_discipline_alike() -> None:
    from cloudddp.injob import output_lines, shim
    from cloudddp.runtime import shipped_files

    assert shim.LINES_SHIPPED_AS == output_lines.SHIPPED_AS in shipped_files()
