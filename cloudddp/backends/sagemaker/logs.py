"""A SageMaker job's log lines, tagged with the process that printed them.

CloudWatch Logs keeps one stream per host (``<job>/algo-2-<epoch>``), in which the container's every process
writes: the training toolkit, torchrun or mpirun, and each rank of the program. cloudddp's launcher prefixes
each line the program prints with its global rank (``[rank3]:``, see :mod:`cloudddp.injob.shim`); under the
toolkit's ``mpirun --tag-output`` that prefix follows Open MPI's own (``[1,3]<stdout>:``). A line with the
prefix is that rank's; any other line is from outside the program (the toolkit, the runtime).

Every stream of the job is read from its head, a page at a time, each stream's position kept between polls; a
poll's new lines are given interleaved by time.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import Any

from cloudddp.backends.status import LogLine
from cloudddp.injob.shim import RANK_LINE

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
_MPI_TAG = re.compile(r"\[\d+,\d+\]<std(?:out|err)>:")


def job_lines(
    logs: Any, job: str, *, hosts: int, follow: bool, finished: Callable[[], bool], poll: float
) -> Iterator[LogLine]:
    """Every ``<job>/algo-N-*`` stream through ``logs`` (a CloudWatch Logs client), interleaved by time, each line
    tagged with its rank (:func:`host_line`). Read once; with ``follow``, every ``poll`` seconds until
    ``finished``, asked before each read, says the job has ended (so the last read gets its last lines)."""
    tokens: dict[str, str | None] = {}
    while True:
        done = finished() if follow else True
        batch = [event for stream in _streams(logs, job) for event in _new_events(logs, stream, tokens)]
        for ts, host, message in sorted(batch, key=lambda x: (x[0], x[1])):
            for line in message.splitlines() or [""]:
                yield host_line(host, line, ts / 1000, hosts=hosts)
        if done:
            return
        time.sleep(poll)


def _streams(logs: Any, job: str) -> list[str]:
    """The names of the job's streams: none while its log group does not exist yet."""
    from botocore.exceptions import ClientError

    try:  # 50 streams a page: a job of more hosts (or restarts: a stream each) needs the next pages
        paginator = logs.get_paginator("describe_log_streams")
        pages = paginator.paginate(logGroupName=LOG_GROUP, logStreamNamePrefix=f"{job}/")
        return [stream["logStreamName"] for page in pages for stream in page["logStreams"]]
    except ClientError as e:
        if e.response["Error"].get("Code") != "ResourceNotFoundException":
            raise
        return []


def _new_events(logs: Any, name: str, tokens: dict[str, str | None]) -> list[tuple[int, str, str]]:
    """The events of stream ``name`` after its position in ``tokens`` (moved on to the end), as (time in ms,
    host, message). A page may be partly full or empty mid-stream: the end is the page whose
    ``nextForwardToken`` is the token passed in (botocore's model of GetLogEvents, as its API reference says)."""
    host = name.split("/", 1)[1].rsplit("-", 1)[0] if "/" in name else name
    events = []
    while True:
        kwargs: dict[str, Any] = {"logGroupName": LOG_GROUP, "logStreamName": name, "startFromHead": True}
        if tokens.get(name):
            kwargs["nextToken"] = tokens[name]
        page = logs.get_log_events(**kwargs)
        events += [(e["timestamp"], host, e["message"]) for e in page["events"]]
        done = page.get("nextForwardToken") == tokens.get(name)
        tokens[name] = page.get("nextForwardToken")
        if done:
            return events


def host_line(host: str, text: str, time: float | None, *, hosts: int) -> LogLine:
    """One line of ``host``'s stream: the rank's (``rank3``, or ``algo-2/rank3`` on more than one host), without
    the prefixes; or the host's own, from outside the program."""
    mpi = _MPI_TAG.match(text)
    start = mpi.end() if mpi else 0
    tag = RANK_LINE.match(text, start)
    if tag is None:
        return LogLine(host, text, time, primary=False)
    rank = int(tag.group(1))
    source = f"{host}/rank{rank}" if hosts > 1 else f"rank{rank}"
    return LogLine(source, text[tag.end() :], time, primary=rank == 0, rank=rank)
