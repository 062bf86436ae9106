"""Which process a log file of an Azure ML job is from, read from its name as the runtime writes it."""

from __future__ import annotations

import pytest

from cloudddp.backends.azureml.logs import LogFiles, source_of


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


@pytest.mark.slow
def test_a_log_file_written_again_after_a_restart_is_read_from_its_start(blob_endpoint: str) -> None:
    """Azure ML restarts a preempted job on new nodes and writes its log files anew: the reader starts over on
    the new file (also when it is already longer than what was read of the old one), never skipping its start."""
    from tests.support.harnesses import AzureMLHarness

    harness = AzureMLHarness(blob_endpoint)
    job = harness.start()  # rank 0 has printed "starting rank 0"
    client = harness.backend._client(harness.backend._workspace_of(job))
    files = LogFiles.of_job(client, client.jobs.get(job), harness.backend._credential(), harness.backend.transport)
    try:
        harness.model.write_log(job, 0, "epoch 1\n")
        assert [line.text for line in files.read(final=False)] == ["starting rank 0", "epoch 1"]
        harness.model.overwrite_log(job, 0, "restarted on new nodes, resuming from epoch 1\nepoch 2\n")
        assert [line.text for line in files.read(final=False)] == [
            "restarted on new nodes, resuming from epoch 1",
            "epoch 2",
        ]
        harness.model.overwrite_log(job, 0, "again\n")  # shorter than what was read
        assert [line.text for line in files.read(final=False)] == ["again"]
    finally:
        files.close()
