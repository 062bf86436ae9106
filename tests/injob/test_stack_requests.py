"""Stacks on request without a cloud: the in-job poller (cloudddp/injob/stack_requests.py) answers each request once
and prints only its answers, for the ranks of its own node; the client's half (cloudddp/injob/stack_answers.py)
reads this request's answers and dumps from a log, never an earlier request's. The clouds' runs are
tests/backends/azureml/test_stacks.py and tests/backends/sagemaker/test_stacks.py."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from types import SimpleNamespace

from cloudddp.injob import stack_requests
from cloudddp.injob.rank_stacks import Answer
from cloudddp.injob.stack_answers import parse, requested
from cloudddp.injob.stack_requests import ANSWER, Answerer, Poller, markers, request_reader, start

SLEEPING = """\
Current thread 0x00007f0000000002 (most recent call first):
  File "/code/train.py", line 13 in <module>"""
WAITING = """\
Thread 4242 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:3252)
    <module> (train.py:20)"""
OLD = """\
Current thread 0x00007f0000000002 (most recent call first):
  File "/code/train.py", line 9 in <module>"""
"""The same thread, dumped earlier on another line."""


def test_each_new_request_is_answered_once_and_a_failed_read_is_silent() -> None:
    reads = iter(["a", "a", None, RuntimeError("no store"), "b", "b"])

    def read() -> str | None:
        value = next(reads)
        if isinstance(value, Exception):
            raise value
        return value

    asked: list[str] = []
    poller = Poller(read, asked.append, 0.01)
    for _ in range(6):
        poller.poll()
    assert asked == ["a", "b"]


def test_the_answerer_asks_its_nodes_ranks_and_prints_one_line_a_rank_and_nothing_else() -> None:
    calls = []

    def ask_all(markers: list[str], node: str, host: str) -> list[Answer]:
        calls.append((markers, node))
        return [Answer(2, 10, "1", host, "signal", world=4), Answer(3, 11, "1", host, "py-spy", WAITING, 4, 1)]

    out = io.StringIO()
    env = {"MLFLOW_RUN_ID": "job-1", "NODE_RANK": "1", "LOCAL_RANK": "0"}
    Answerer(SimpleNamespace(ask_all=ask_all), env, out)("r1")
    printed = out.getvalue().splitlines()
    assert calls == [(["MLFLOW_RUN_ID=job-1", "NODE_RANK=1"], "NODE_RANK")]
    assert len(printed) == 2 and all(line.startswith(f"{ANSWER}r1: ") for line in printed), printed
    again = parse(printed[1], "r1")
    assert again is not None and asdict(again)["text"] == WAITING and again.rank == 3
    assert parse(printed[1], "r2") is None  # another request's answer is not this one's


def test_the_node_is_told_by_the_platforms_node_rank_else_torchruns_and_the_job_by_its_name() -> None:
    assert markers({"TRAINING_JOB_NAME": "j", "GROUP_RANK": "1"}) == (
        ["TRAINING_JOB_NAME=j", "GROUP_RANK=1"],
        "GROUP_RANK",
    )
    assert markers({"MLFLOW_RUN_ID": "r", "NODE_RANK": "0", "GROUP_RANK": "0"})[0] == ["MLFLOW_RUN_ID=r", "NODE_RANK=0"]


def test_only_the_first_process_of_a_node_with_a_request_path_polls() -> None:
    fake = SimpleNamespace(ask_all=lambda *_: [])
    assert request_reader({}) is None
    assert request_reader({"MLFLOW_TRACKING_URI": "http://x"}) is None  # a user's own server, not a job's run
    assert start(fake, {"LOCAL_RANK": "0"}) is None
    s3 = {stack_requests.REQUEST_URI: "s3://bucket/p/stacks/job", "LOCAL_RANK": "1"}
    assert start(fake, s3) is None
    poller = start(fake, {**s3, "LOCAL_RANK": "0", stack_requests.POLL: "30"})
    assert poller is not None and poller.is_alive() and poller.daemon and poller.interval == 30
    poller.stop()


@dataclass
class Line:
    source: str
    text: str
    rank: int | None


class FakeLog:
    """A run's log: the lines there now, and those the job adds once it has read the request."""

    def __init__(self, now: list[Line], hosts: tuple[str, ...] = ("algo-1", "algo-2")) -> None:
        self.lines, self.hosts = list(now), hosts
        self.request: str | None = None
        self.more = threading.Event()

    def read(self, follow: bool) -> Iterator[Line]:
        yield from list(self.lines)
        if follow:
            self.more.wait(5)
            yield from self.added

    added: list[Line] = []

    def answer(self, request: str) -> None:
        """What two hosts print for ``request``: rank 0 by py-spy, rank 1 by the signal, then its dump."""
        new = [
            Line(
                "algo-1",
                f"{ANSWER}{request}: " + json.dumps(asdict(Answer(0, 5, "0", "algo-1", "py-spy", WAITING, 2))),
                None,
            ),
            Line(
                "algo-2",
                f"{ANSWER}{request}: " + json.dumps(asdict(Answer(1, 6, "1", "algo-2", "signal", "", 2))),
                None,
            ),
            *[Line("algo-2/rank1", text, 1) for text in SLEEPING.splitlines()],
        ]
        self.added = [line for line in new if line.source.split("/")[0] in self.hosts]
        self.lines += self.added
        self.more.set()


def test_the_client_reads_this_requests_answers_and_dumps_and_never_an_earlier_dump() -> None:
    earlier = [Line("algo-2/rank1", text, 1) for text in OLD.splitlines()]  # an earlier request's dump
    earlier.append(
        Line("algo-1", f"{ANSWER}old: " + json.dumps(asdict(Answer(0, 5, "0", "algo-1", "none", "gone", 2))), None)
    )
    log = FakeLog(earlier)
    started = time.monotonic()
    found = requested(log.answer, log.read, answer_wait=10, dump_wait=3)
    assert time.monotonic() - started < 8
    assert found.world == 2 and found.missing == {}, found
    by_rank = {r.rank: r for r in found.stacks}
    assert by_rank[0].waiting_in() == "all_reduce" and by_rank[0].host == "algo-1"
    own = by_rank[1].own_frame()
    assert own is not None and (own.line, own.function) == (13, "<module>"), by_rank[1]


def test_a_host_that_never_answers_leaves_its_ranks_missing_with_why() -> None:
    log = FakeLog([], hosts=("algo-1",))  # algo-2 never read the request
    found = requested(log.answer, log.read, answer_wait=1.5, dump_wait=0.5)
    assert [r.rank for r in found.stacks] == [0]
    assert found.missing == {1: "no answer in the run's log 2 s after asking"}, found.missing
