"""A SageMaker job's log read to its end through pages as CloudWatch Logs gives them: some empty mid-stream,
against moto running as a real HTTP server (the emulator answers GetLogEvents so, see its ``LOG_PAGE``)."""

from __future__ import annotations

import boto3
import pytest

from cloudddp.backends.sagemaker.logs import job_lines
from tests.support.aws_emulator import LOG_PAGE, put_logs, use_emulator

pytestmark = pytest.mark.slow


def test_a_stream_is_read_past_its_empty_pages_to_the_end(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    use_emulator(monkeypatch, moto_url)
    lines = [f"[rank0]:line {i}" for i in range(3 * LOG_PAGE + 1)]  # four pages, an empty one before each later
    put_logs("paged-logs", "algo-1", lines, 0)
    read = job_lines(boto3.client("logs"), "paged-logs", hosts=1, follow=False, finished=lambda: True, poll=0)
    assert [line.text for line in read] == [f"line {i}" for i in range(3 * LOG_PAGE + 1)]


def test_a_second_read_from_the_end_gives_only_the_lines_written_since(
    moto_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_emulator(monkeypatch, moto_url)
    put_logs("paged-follow", "algo-1", ["[rank0]:first", "[rank0]:second", "[rank0]:third"], 0)
    polls = iter([False, True])
    read = job_lines(boto3.client("logs"), "paged-follow", hosts=1, follow=True, finished=lambda: next(polls), poll=0)
    assert [next(read).text for _ in range(3)] == ["first", "second", "third"]
    put_logs("paged-follow", "algo-1", ["[rank0]:fourth"], 10)
    assert [line.text for line in read] == ["fourth"]
