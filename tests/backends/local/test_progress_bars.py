"""Logs stay readable around progress bars: a tqdm script, 1 node × 2 processes under real torchrun.

tqdm rewrites its line with ``\\r`` and ends it only when the bar closes. Without the rank launcher's line discipline
(:class:`cloudddp.injob.output_lines.Lines`) torchrun copied each unfinished update into the node's console, and its own
lines and the other rank's were glued to it: a traceback behind a bar was not seen as one, and a cancelled run's
log ended in torchrun's SignalException traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudddp.api import Job, Run
from cloudddp.backends.status import RunState
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow
TRACEBACK = "Traceback (most recent call last):"

BARS = """
import os, sys, time
from tqdm import tqdm
rank = int(os.environ["RANK"])
steps, crash = int(sys.argv[1]), int(sys.argv[2])  # rank 1 raises after that step (-1: never)
bar = tqdm(total=steps, desc=f"bar of rank {rank}", mininterval=0.01)
for step in range(steps):
    time.sleep(0.002 if rank == 0 else 0.02)  # rank 0's bar ends before rank 1 fails
    bar.update(1)
    if step == 20:
        print("bars running", flush=True)
    if rank == 1 and step == crash:
        raise RuntimeError("boom behind the bar")
bar.close()
print(f"rank {rank} done", flush=True)
"""


def bars_job(tmp_path: Path, steps: int, crash: int = -1) -> Path:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "bars.py").write_text(BARS)
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"name: progress-bars-{steps}\n"
        f"code: {{dir: {code}, entry: bars.py, args: ['{steps}', '{crash}']}}\n"
        "resources: {nodes: 1, gpus_per_node: 0}\n"
        "local: {nodes: 1, processes_per_node: 2}\n"
    )
    return spec


def rank_texts(run: Run, rank: int) -> list[str]:
    return [line.text for line in run.logs() if line.rank == rank]


@pytest.mark.timeout(180)
def test_each_ranks_bar_is_one_line_of_its_own_and_a_traceback_behind_a_bar_is_named(tmp_path: Path) -> None:
    run = Job.load(bars_job(tmp_path, 100, crash=60)).submit("local")
    status = run.wait(timeout=120, poll=0.5)
    assert status.state is RunState.FAILED, status
    lines = list(run.logs())
    glued = [line.text for line in lines if "[rank" in line.text or (line.rank is None and "it/s]" in line.text)]
    assert not glued, glued  # nothing of one process's inside another's line
    zero, one = rank_texts(run, 0), rank_texts(run, 1)
    assert [text for text in zero if "bar of rank 0" in text] == [next(t for t in zero if "100/100" in t)], zero
    assert one.count(TRACEBACK) == 1 and "RuntimeError: boom behind the bar" in one, one
    assert "61/100" in one[one.index(TRACEBACK) - 1], "the bar's last state, on the line before"
    failure = status.details["failure"]
    assert failure["rank"] == 1 and TRACEBACK in failure["log_tail"], failure
    assert "RuntimeError: boom behind the bar" in failure["log_tail"], failure


@pytest.mark.timeout(180)
def test_a_cancelled_run_with_bars_ends_without_torchruns_signal_traceback(tmp_path: Path) -> None:
    run = Job.load(bars_job(tmp_path, 100000)).submit("local")
    wait_until(lambda: sum("bars running" in line.text for line in run.logs()) == 2, 120, poll=0.2)
    assert run.cancel()
    assert run.wait(timeout=60, poll=0.5).state is RunState.CANCELLED
    texts = [line.text for line in run.logs()]
    assert not [text for text in texts if "Traceback" in text or text.startswith("torch.")], texts[-40:]
    assert any(text.startswith("torchrun stopped on signal 15") for text in texts), texts[-40:]
    for rank in (0, 1):  # the bar's last state when the rank stopped (and one every 10 s before that)
        assert 1 <= len([text for text in rank_texts(run, rank) if "bar of rank" in text]) <= 3, texts
