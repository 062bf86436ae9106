"""``cloudddp stacks``' pieces without a run: reading each rank's first dump from its log lines
(cloudddp/injob/rank_stacks.py), the answers as a capture with its verdict (cloudddp/injob/culprit.py), and what
the command prints (cloudddp/cli/cmd_stacks.py). The real runs are tests/backends/{local,slurm}/test_stacks.py."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time

from cloudddp.cli.cmd_stacks import lines
from cloudddp.injob.culprit import captured
from cloudddp.injob.rank_stacks import STACK_SIGNAL, Answer, answered, ask, gather

SLEEPING = """\
Thread 0x00007f0000000001 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 327 in wait
Current thread 0x00007f0000000002 (most recent call first):
  File "/code/train.py", line 13 in <module>"""
WAITING = """\
Current thread 0x00007f0000000003 (most recent call first):
  File "/site-packages/torch/distributed/distributed_c10d.py", line 2100 in all_reduce
  File "/code/train.py", line 20 in <module>"""


def dumped(text: str, rank: int) -> list[tuple[int, str]]:
    return [(rank, line) for line in text.splitlines()]


def test_a_ranks_first_dump_is_read_whole_and_a_second_one_and_other_lines_are_left_out() -> None:
    reads = iter([[(1, "rank 1 step 5"), *dumped(SLEEPING, 1)[:2]], [*dumped(SLEEPING, 1)[2:], *dumped(SLEEPING, 1)]])
    clock = itertools.count(0, 0.5).__next__
    got = gather(lambda: next(reads, []), [1], clock=clock, sleep=lambda _: None)
    assert got == {1: SLEEPING}


def test_a_rank_that_never_writes_is_given_up_after_the_wait_and_named() -> None:
    clock = itertools.count(0, 1.0).__next__
    got = gather(lambda: dumped(WAITING, 0) if clock() < 3 else [], [0, 1], wait=5, clock=clock, sleep=lambda _: None)
    assert set(got) == {0}
    answers = answered([Answer(0, 10, "0", "h", "signal"), Answer(1, 11, "0", "h", "signal")], got, wait=5)
    assert [(a.how, a.text) for a in answers] == [
        ("faulthandler", WAITING),
        ("none", "no stack in its log 5 s after asking process 11"),
    ]


def test_a_process_that_does_not_handle_the_signal_is_named_and_not_signalled() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.3)
        answer = ask(0, child.pid, "0", "here")
        assert answer.how == "none" and "does not handle the stack signal" in answer.text, answer
        assert child.poll() is None  # still running: it was never sent the signal that would have killed it
    finally:
        child.kill()
        child.wait()


def test_the_rank_outside_the_collective_stands_out_and_each_rank_is_printed_once() -> None:
    found = captured(
        [
            Answer(0, 10, "0", "h0", "faulthandler", WAITING, world=4).__dict__,
            Answer(1, 11, "0", "h0", "faulthandler", SLEEPING, world=4).__dict__,
            Answer(1, 12, "0", "h0", "faulthandler", WAITING, world=4).__dict__,  # a second answer of rank 1: dropped
            Answer(2, 13, "1", "h1", "faulthandler", WAITING, world=4).__dict__,
            Answer(3, 14, "1", "h1", "none", "process 14 does not handle the stack signal", world=4).__dict__,
        ]
    )
    printed = lines(found, 1.25, all_threads=False)
    assert printed[0] == "3 of 4 ranks gave their stacks in 1.2 s; the run goes on"
    assert printed[1] == (
        "stands out: rank 1 on node 0 (h0): train.py:13 in <module>; rank 3 gave no stack; ranks 0, 2: waiting in "
        "all_reduce"
    ), printed
    headings = [line for line in printed if line.endswith("most recent call first:")]
    assert headings == [
        "rank 1, most recent call first:",
        "ranks 0, 2 (waiting in all_reduce), most recent call first:",
    ]
    assert printed[-1] == "rank 3: no stack: process 14 does not handle the stack signal"
    assert found.to_dict()["verdict"]["culprits"] == [1, 3]  # type: ignore[index]


def test_ranks_alike_or_none_in_a_collective_name_nobody() -> None:
    alike = captured([Answer(r, r, "0", "h", "faulthandler", WAITING, world=2).__dict__ for r in range(2)])
    assert alike.verdict() is None and alike.to_dict()["verdict"] is None
    apart = captured([Answer(r, r, "0", "h", "faulthandler", SLEEPING, world=2).__dict__ for r in range(2)])
    assert apart.verdict() is None  # no rank waits: a look at a run between collectives, not a hang
    printed = lines(apart, 0.5, all_threads=True)
    assert printed[1] == "ranks 0, 1, most recent call first:" and "  thread 0x00007f0000000001:" in printed, printed


def test_py_spys_dump_is_read_as_a_ranks_stacks() -> None:
    dump = 'Thread 42 (idle): "MainThread"\n    sleep (time.py:1)\n    <module> (train.py:13)\n'
    found = captured([Answer(0, 10, "0", "h", "py-spy", dump, world=1).__dict__])
    assert [f.function for f in found.stacks[0].main.frames] == ["sleep", "<module>"]  # type: ignore[union-attr]


def test_a_process_that_handles_the_signal_a_moment_after_it_is_found_is_asked_and_answers() -> None:
    """A rank caught starting (its handler not yet registered) is looked at again, not named as one that never
    answers."""
    late = "import faulthandler, time; print('started', flush=True); time.sleep(0.5); "
    late += f"faulthandler.register({STACK_SIGNAL}); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", late], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "started\n"  # running, not yet handling it
        answer = ask(0, child.pid, "0", "here")
        assert answer.how == "signal", answer
        time.sleep(1)
        assert child.poll() is None  # asked only once it handled the signal: alive
    finally:
        child.kill()
        _, err = child.communicate()
    assert "most recent call first" in err, err
