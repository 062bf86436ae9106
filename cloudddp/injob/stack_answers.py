"""The client's half of a stack request (:mod:`cloudddp.injob.stack_requests`): leave the request, read the hosts'
answers and the ranks' dumps from the run's log, and make them one :class:`~cloudddp.injob.culprit.Capture`.

Used by the backends that reach a job only through its storage and its log (SageMaker, Azure ML); not shipped into
jobs. The log is read twice: once as it is now, to count each source's lines, then followed, each source's counted
lines skipped, so a dump an earlier request (or the stall watchdog) left there is never read as this one's.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from cloudddp.injob.culprit import Capture, captured
from cloudddp.injob.rank_stacks import WAIT_SECONDS, Answer, answered, gather
from cloudddp.injob.stack_requests import ANSWER


class Line(Protocol):
    """A line of the run's log (:class:`cloudddp.backends.status.LogLine`)."""

    @property
    def source(self) -> str: ...

    @property
    def text(self) -> str: ...

    @property
    def rank(self) -> int | None: ...


def parse(text: str, request: str) -> Answer | None:
    """The answer a line carries to ``request``; None for any other line."""
    at = text.find(ANSWER + request + ": ")
    if at < 0:
        return None
    try:
        return Answer(**json.loads(text[at + len(ANSWER) + len(request) + 2 :]))
    except (ValueError, TypeError):
        return None


class _Follower:
    """The log's lines after those there now, from a thread: ``lines(True)`` followed, each source's first lines (as
    many as ``lines(False)`` gave it) skipped."""

    def __init__(self, lines: Callable[[bool], Iterable[Line]]) -> None:
        self.old = Counter(line.source for line in lines(False))
        self.queue: queue.Queue[Line] = queue.Queue()
        self.stopped = threading.Event()
        threading.Thread(target=self._follow, args=(lines,), name="cloudddp-stack-answers", daemon=True).start()

    def _follow(self, lines: Callable[[bool], Iterable[Line]]) -> None:
        seen: Counter[str] = Counter()
        for line in lines(True):
            if self.stopped.is_set():
                return
            seen[line.source] += 1
            if seen[line.source] > self.old[line.source]:
                self.queue.put(line)

    def new(self) -> Iterator[Line]:
        while True:
            try:
                yield self.queue.get_nowait()
            except queue.Empty:
                return


def requested(
    request: Callable[[str], object],
    lines: Callable[[bool], Iterable[Line]],
    *,
    answer_wait: float,
    dump_wait: float = WAIT_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
) -> Capture:
    """Every rank's stacks: ``request`` leaves a fresh request id where the job reads it; the hosts' answers are read
    from ``lines`` (``lines(follow)``: the run's log) for up to ``answer_wait`` seconds (until every rank of the job
    has answered), then the dumps of the ranks that were signalled for up to ``dump_wait`` more. A rank that gave
    no answer in time is missing, with why."""
    follower = _Follower(lines)
    request_id = uuid.uuid4().hex[:12]
    request(request_id)
    answers: dict[int, Answer] = {}

    def read() -> list[tuple[int, str]]:
        """The ranks' new lines; the answers among them kept in ``answers``."""
        found = []
        for line in follower.new():
            answer = parse(line.text, request_id)
            if answer is not None:
                answers.setdefault(answer.rank, answer)
            elif line.rank is not None:
                found.append((line.rank, line.text))
        return found

    early: list[tuple[int, str]] = []  # dumps that came with the answers, read first
    deadline = time.monotonic() + answer_wait
    while not _all_answered(answers) and time.monotonic() < deadline:
        early += read()
        sleep(0.5)

    def then() -> list[tuple[int, str]]:
        found = early + read()
        early.clear()
        return found

    dumps = gather(then, [a.rank for a in answers.values() if a.how == "signal"], wait=dump_wait)
    follower.stopped.set()
    found = captured(a.__dict__ for a in answered(sorted(answers.values(), key=lambda a: a.rank), dumps, dump_wait))
    world = max((a.world for a in answers.values()), default=0)
    late = f"no answer in the run's log {answer_wait:.0f} s after asking"
    found.missing.update({rank: late for rank in range(world) if rank not in answers})
    return found


def _all_answered(answers: dict[int, Answer]) -> bool:
    world = max((a.world for a in answers.values()), default=0)
    return bool(world) and set(answers) >= set(range(world))
