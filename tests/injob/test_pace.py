"""The straggler watch's judgement with stubbed times: who is slow against the others' median, when a slow rank
is named (two looks in a row) and when it is no longer, the line and metric record rank 0 prints, each rank's
windows of its own work, and the setting the job carries."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cloudddp.injob import pace
from cloudddp.injob.pace import TAG, Clock, Report, Verdicts, judge, line, setting
from cloudddp.observe.metrics import PREFIX, parse_metric_line

EVEN = [Report(0, 0.01, 0.25, "0", "a", 1), Report(1, 0.011, 0.25, "0", "a", 1), Report(2, 0.0105, 0.25, "1", "b", 1)]


def reports(*works: float, interval: float = 0.25) -> list[Report]:
    return [Report(r, work, interval, str(r // 2), f"host{r // 2}", 1) for r, work in enumerate(works)]


def test_a_rank_doing_twenty_times_the_others_work_is_slow_with_its_ratio() -> None:
    slow = judge(reports(0.01, 0.21, 0.01, 0.012), 1.5)
    assert [(s.rank, round(s.ratio)) for s in slow] == [(1, 21)]
    assert slow[0].median == pytest.approx(0.01)


def test_two_ranks_are_compared_with_each_other_not_with_their_own_mean() -> None:
    """The median of the others: with two ranks, a rank 2.1x slower than the other is only 1.35x their mean."""
    assert [s.rank for s in judge(reports(0.01, 0.021, interval=0.1), 1.5)] == [1]
    assert judge(reports(0.01, 0.014, interval=0.1), 1.5) == []


def test_even_ranks_a_small_difference_and_a_lone_rank_name_nobody() -> None:
    assert judge(EVEN, 1.5) == []
    # ×3, but 2 ms of a 1 s step: less than the floor's share of the step, noise nobody waits for
    assert judge(reports(0.001, 0.003, 0.001, interval=1.0), 1.5) == []
    assert judge(reports(0.5), 1.5) == []


def test_a_whole_slow_node_is_named_slowest_first() -> None:
    slow = judge(reports(0.01, 0.01, 0.30, 0.32, 0.01), 1.5)
    assert [s.rank for s in slow] == [3, 2]


def test_a_slow_rank_is_named_after_two_looks_in_a_row_once_and_cleared_after_two_fast_ones() -> None:
    verdicts = Verdicts()
    slow, fast = reports(0.01, 0.21, 0.01), reports(0.01, 0.011, 0.01)
    by_rank = {r.rank: r for r in slow}
    assert verdicts.look(judge(slow, 1.5), by_rank) == []  # one look: not yet persistent
    named = verdicts.look(judge(slow, 1.5), by_rank)
    assert named[0] == (
        f"{TAG} rank 1 on node 0 (host0): 0.21 s of its own work per step against a median of 0.01 s (×21); "
        "the others wait for it"
    )
    assert verdicts.look(judge(slow, 1.5), by_rank) == []  # said once
    assert verdicts.look(judge(fast, 1.5), {r.rank: r for r in fast}) == []  # one fast look: still named
    assert verdicts.look(judge(slow, 1.5), by_rank) == []
    verdicts.look(judge(fast, 1.5), {r.rank: r for r in fast})
    cleared = verdicts.look(judge(fast, 1.5), {r.rank: r for r in fast})
    assert cleared[0].startswith(f"{TAG} {pace.CAUGHT_UP}"), cleared


def test_the_metric_record_is_a_metric_line_with_the_straggler_in_numbers() -> None:
    assert pace.METRIC == PREFIX
    slow = reports(0.01, 0.21, 0.01)
    verdicts = Verdicts()
    verdicts.look(judge(slow, 1.5), {r.rank: r for r in slow})
    record = parse_metric_line(verdicts.look(judge(slow, 1.5), {r.rank: r for r in slow})[1])
    assert record is not None and record.step is None
    assert record.values["stragglers"] == 1 and record.values["straggler_rank"] == 1, record
    assert record.values["straggler_ratio"] == 21 and record.values["straggler_node"] == 0, record
    assert record.values["straggler_seconds"] == pytest.approx(0.21), record


def test_several_stragglers_are_named_in_one_line() -> None:
    slow = reports(0.01, 0.01, 0.30, 0.32)
    text = line(judge(slow, 1.5), {r.rank: r for r in slow})
    assert "rank 3 on node 1 (host1): 0.32 s" in text and "; rank 2 on node 1 (host1): 0.3 s" in text, text
    assert text.endswith("the others wait for them"), text


def test_a_ranks_window_runs_from_a_step_to_the_next_backward_less_its_wait_for_the_others() -> None:
    clock = Clock()
    clock.backward(0.5)  # before any step: no window
    clock.stepped(1.0)
    clock.waiting(0.05)  # the forward's buffer broadcast
    clock.backward(1.3)
    clock.backward(1.4)  # gradient accumulation: the same step's
    clock.stepped(2.0)
    clock.backward(2.1)
    clock.stepped(3.0)
    work, interval, count = clock.take() or (0, 0, 0)
    assert count == 2 and work == pytest.approx((0.25 + 0.1) / 2) and interval == pytest.approx(1.0)
    assert clock.take() is None  # taken: the next look starts afresh


@pytest.mark.parametrize(("text", "expected"), [("1.5:10", (1.5, 10.0)), ("off", None), (None, None), ("1:10", None)])
def test_the_setting_the_job_carries(text: str | None, expected: tuple[float, float] | None) -> None:
    assert setting(text) == expected


CHILD = """\
import datetime, sys, time
import torch.distributed as dist
from cloudddp.injob import pace

store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False, timeout=datetime.timedelta(seconds=30))
watch = pace.Watch(pace.Clock(), 1.5, 0.0001)  # a look every 0.1 ms: the thread is nearly always in the store
watch._run = lambda: watch._watch(store, 0, 2)
watch.start()
time.sleep(0.3)
"""


def test_a_process_ending_while_its_watch_talks_to_the_store_exits_0(tmp_path: Path) -> None:
    """A daemon thread that comes back from the store's native call while the interpreter finalizes is ended inside
    C++ and aborts the process (half of such ends, unguarded): a training that ended well read as failed."""
    import torch.distributed as dist

    (tmp_path / "child.py").write_text(CHILD)
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    command = [sys.executable, str(tmp_path / "child.py"), str(server.port)]
    children = [subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env) for _ in range(8)]
    errors = [child.communicate(timeout=120)[1] for child in children]
    assert [child.returncode for child in children] == [0] * 8, {error[-300:] for error in errors}
