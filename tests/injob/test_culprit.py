"""The hang's judge (cloudddp/injob/culprit.py) and the backends' reader of its verdict (cloudddp/backends/verdicts.py),
on stacks as faulthandler, py-spy and the doctor write them."""

from __future__ import annotations

import json

from cloudddp.backends.status import Cause
from cloudddp.backends.verdicts import cause_of, concluded, verdict_in
from cloudddp.injob import culprit
from cloudddp.injob.culprit import Frame, RankStacks, Thread

FAULTHANDLER = """\
Thread 0x00007f58e77fe6c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 324 in wait
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x00007f590cc4ab80 (most recent call first):
  File "/job/code/train.py", line 54 in hang_forever
  File "/job/code/train.py", line 60 in <module>
"""
PY_SPY = """\
Process 4242: python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 4242 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:3252)
    wrapper (torch/distributed/c10d_logger.py:83)
    <module> (train.py:61)
Thread 4250 (idle): "Thread-1"
    wait (threading.py:324)
"""


def rank(number: int, *functions: str, node: str = "0", host: str = "h") -> RankStacks:
    frames = tuple(Frame(f"/job/{f}.py", 10 + i, f) for i, f in enumerate(functions))
    return RankStacks(number, [Thread("MainThread", frames, main=True)], node=node, host=host)


def test_faulthandlers_main_thread_is_the_one_running_the_script_and_its_line_is_named() -> None:
    threads = culprit.parse_faulthandler(FAULTHANDLER)
    assert [t.main for t in threads] == [False, True]
    stacks = RankStacks(1, threads, node="0", host="vm")
    assert stacks.waiting_in() is None
    assert stacks.own_frame() == Frame("/job/code/train.py", 54, "hang_forever")


def test_py_spys_main_thread_waits_in_all_reduce() -> None:
    threads = culprit.parse_py_spy(PY_SPY)
    assert [t.name for t in threads] == ["MainThread", "Thread-1"] and threads[0].main
    assert RankStacks(0, threads).waiting_in() == "all_reduce"


def test_the_rank_in_no_collective_is_the_culprit_and_the_others_wait() -> None:
    verdict = culprit.decide([rank(0, "all_reduce", "<module>"), rank(1, "sleep", "<module>", node="1")], 2)
    assert verdict.culprit_ranks() == [1] and verdict.waiting == {"all_reduce": [0]}
    assert verdict.line().startswith("cloudddp: hang: rank 1 on node 1 (h): sleep.py:10 in sleep; rank 0: waiting")


def test_a_rank_that_gave_no_stack_is_named_as_silent() -> None:
    verdict = culprit.decide([rank(0, "barrier"), rank(2, "barrier")], 3)
    assert verdict.silent == [1] and verdict.culprit_ranks() == [1]
    assert "rank 1 gave no stack" in verdict.line()


def test_a_mismatched_collective_names_the_ranks_in_the_rarer_one() -> None:
    verdict = culprit.decide([rank(0, "all_reduce"), rank(1, "broadcast"), rank(2, "all_reduce")], 3)
    assert verdict.culprit_ranks() == [1] and verdict.waiting == {"all_reduce": [0, 2]}


def test_backward_is_named_as_ddps_gradient_all_reduce() -> None:
    assert rank(0, "_engine_run_backward", "backward", "<module>").waiting_in() == culprit.BACKWARD


def test_groups_show_alike_ranks_once_the_culprits_first() -> None:
    stacks = [rank(0, "all_reduce"), rank(1, "sleep"), rank(2, "all_reduce"), rank(3, "all_reduce")]
    assert [ranks for ranks, _ in culprit.groups(stacks)] == [[1], [0, 2, 3]]
    lines = culprit.render(stacks)
    assert lines[0] == "rank 1, most recent call first:"
    assert "ranks 0, 2, 3 (waiting in all_reduce), most recent call first:" in lines


def test_the_doctors_record_round_trips_with_its_source_lines() -> None:
    stacks = RankStacks(3, [Thread("MainThread", (Frame("/x/train.py", 5, "<module>", "time.sleep(9)"),), True)])
    back = culprit.from_record(json.loads(culprit.to_record(stacks)))
    assert back == stacks and back.own_frame() is not None and back.own_frame().where().endswith("time.sleep(9)")


def test_the_backends_read_the_last_verdict_and_its_stacks_behind_any_prefix() -> None:
    log = [
        "[rank0]: step 4",
        "[rank2]: cloudddp: hang: rank 1 on node 0 (node2): train.py:13 in <module>: time.sleep(3600); "
        "ranks 3 gave no stack; ranks 0, 2: waiting in all_reduce",
        "[rank2]: cloudddp: every rank's stack, the odd ones out first:",
        "[rank0]: unrelated",
        "[rank2]: rank 1, most recent call first:",
        "[rank2]:     train.py:13 in <module>: time.sleep(3600)",
        "[rank2]: Traceback (most recent call last):",
        "[rank2]:   File x",
    ]
    verdict = verdict_in(log)
    assert verdict is not None and verdict.culprits == [1, 3] and (verdict.node, verdict.host) == ("0", "node2")
    assert verdict.stacks == ["rank 1, most recent call first:", "    train.py:13 in <module>: time.sleep(3600)"]
    assert verdict_in(["no verdict here"]) is None


def test_the_preflights_refusal_is_an_infrastructure_failure_with_the_lines_that_prove_it() -> None:
    from cloudddp.injob.interconnect import FAILED, TAG

    log = [
        "[rank0]: step 0",
        f"[rank0]: {FAILED} chosen for 400 Gb/s InfiniBand but NCCL uses NET/Socket on ranks 8-15 (hosts b): the "
        "hosts' InfiniBand is not in use; the job stops before training",
        f"[rank0]: {TAG} rank 8 on b: NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Socket/0",
    ]
    found = concluded(log)
    assert found is not None and found["interconnect"].startswith("chosen for 400 Gb/s InfiniBand but NCCL uses")
    assert found["log_tail"] == ["rank 8 on b: NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Socket/0"]
    cause, message = cause_of(found)
    assert cause is Cause.INFRASTRUCTURE and message.startswith("interconnect: chosen for 400 Gb/s InfiniBand")
    hang = concluded(["cloudddp: hang: rank 1: t.py:3 in <module>; rank 0: waiting in barrier"])
    assert hang is not None and cause_of(hang) == (
        Cause.HANG,
        "hang: rank 1: t.py:3 in <module>; rank 0: waiting in barrier",
    )
    assert concluded(["nothing concluded"]) is None
