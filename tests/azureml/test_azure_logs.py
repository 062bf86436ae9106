"""Which process a log file of an Azure ML job is from, read from its name as the runtime writes it."""

from __future__ import annotations

import pytest

from cloudddp.backends.azureml.logs import PRIMARY, source_of


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("user_logs/std_log_process_00.txt", "process_0"),  # azure-ai-ml's test_job_ops_helper.py names
        ("user_logs/std_log_process_01.txt", "process_1"),
        ("user_logs/std_log_process_0.txt", "process_0"),
        ("user_logs/std_log_process_10.txt", "process_10"),
        ("user_logs/std_log_process_000_ps.txt", "process_0_ps"),
        ("user_logs/std_log.txt", "std_log"),
    ],
)
def test_the_rank_is_read_from_the_file_name_as_an_integer(name: str, source: str) -> None:
    assert source_of(name) == source
    assert (source in PRIMARY) == (source in ("process_0", "std_log"))
