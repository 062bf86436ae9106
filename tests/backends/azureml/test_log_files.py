"""Which process a log file of an Azure ML job is from, read from its name as the runtime writes it."""

from __future__ import annotations

import pytest

from cloudddp.backends.azureml.logs import source_of


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("user_logs/std_log_process_00.txt", ("rank0", 0)),  # azure-ai-ml's test_job_ops_helper.py names
        ("user_logs/std_log_process_01.txt", ("rank1", 1)),
        ("user_logs/std_log_process_0.txt", ("rank0", 0)),
        ("user_logs/std_log_process_10.txt", ("rank10", 10)),
        ("user_logs/std_log_process_000_ps.txt", ("process_0_ps", None)),  # a parameter server: not a rank
        ("user_logs/std_log.txt", ("rank0", 0)),  # a single process's
    ],
)
def test_the_rank_is_read_from_the_file_name_as_an_integer(name: str, source: tuple[str, int | None]) -> None:
    assert source_of(name) == source
