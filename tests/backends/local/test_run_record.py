"""A local run's record (status.json): written a few keys at a time, read back typed, a misspelt key refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cloudddp.backends.local.record import LocalRunStatus
from cloudddp.backends.local.rundir import RunDir
from cloudddp.backends.status import RunState


def run_dir(tmp_path: Path) -> RunDir:
    run = RunDir(tmp_path / "job-20250101-000000-abcd")
    run.path.mkdir()
    return run


def test_the_file_holds_the_keys_written_so_far_and_reads_back_typed(tmp_path: Path) -> None:
    run = run_dir(tmp_path)
    run.write_status(state="starting", name="job", nodes=2, created_at=1.5)
    run.write_status(supervisor_pid=4242, supervisor=None)
    run.write_status(state="running", started_at=2.5, node_pgids=[11, 12], node_processes=[{"start": 7, "boot": "b"}])
    assert json.loads(run.status_file.read_text()) == {
        "state": "running",
        "name": "job",
        "nodes": 2,
        "created_at": 1.5,
        "supervisor_pid": 4242,
        "supervisor": None,
        "started_at": 2.5,
        "node_pgids": [11, 12],
        "node_processes": [{"start": 7, "boot": "b"}],
    }
    st = run.read_status()
    assert st.run_state is RunState.RUNNING and st.nodes == 2 and st.node_pgids == (11, 12)
    assert st.supervisor_pid == 4242 and st.supervisor_process() is None and st.cpu_s is None
    assert [p and p.pid for p in st.node_groups()] == [11]  # a pid without its record names no process
    assert run.node_logs() == [run.node_log(0), run.node_log(1)]


def test_a_misspelt_key_or_a_value_of_the_wrong_type_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    run = run_dir(tmp_path)
    run.write_status(state="starting")
    with pytest.raises(TypeError, match="'sate'"):
        run.write_status(sate="running")
    with pytest.raises(ValueError):
        run.write_status(started_at="soon")
    assert json.loads(run.status_file.read_text()) == {"state": "starting"}


def test_a_missing_damaged_or_earlier_file_reads_with_defaults_and_keeps_keys_it_does_not_know(tmp_path: Path) -> None:
    run = run_dir(tmp_path)
    assert run.read_status() == LocalRunStatus()  # missing
    run.status_file.write_text("{not json")
    assert run.read_status() == LocalRunStatus()
    run.status_file.write_text(json.dumps({"state": "running", "supervisor_pid": 4242, "later_key": [1]}))
    st = run.read_status()
    assert st.run_state is RunState.RUNNING and st.supervisor is None and st.node_pgids == () and st.nodes == 1
    run.write_status(cancel_requested=True)
    assert json.loads(run.status_file.read_text()) == {
        "state": "running",
        "supervisor_pid": 4242,
        "later_key": [1],
        "cancel_requested": True,
    }


def test_details_show_the_end_keys_that_were_written(tmp_path: Path) -> None:
    run = run_dir(tmp_path)
    assert run.write_status(state="succeeded", exit_codes=[0, 0]).details() == {"exit_codes": [0, 0]}
    failed = run.read_status().updated(exit_codes=[1], failure={"node": 0, "exitcode": 1}, cause="user error")
    assert failed.details() == {"exit_codes": [1], "failure": {"node": 0, "exitcode": 1}}
    with pytest.raises(TypeError):
        run.read_status().updated(exit_code=[1])
