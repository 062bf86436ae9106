"""``cloudddp stacks`` on a healthy running Azure ML job, on the rig (tests/support/azure_rig.py, with a real MLflow
server as the workspace's tracking store): 2 nodes × 1 process on this one machine, each process's output uploaded
to its own log file. The command tags the job's MLflow run; the launcher of each node's first process reads the tag
(every second here), asks its own node's rank once, and the dumps come back through the
log files. Each rank is shown once, and the job then goes on, finishes, and its checkpoint is whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudddp.api import Run
from cloudddp.backends.status import RunState
from cloudddp.injob.stack_requests import POLL
from tests.backends.azureml.test_recovery import rig, submitted
from tests.support.azure_launchers import Datastores
from tests.support.azure_nodes import AzureNodes
from tests.support.azure_rig import WorkspaceModel
from tests.support.cli import cli
from tests.support.harnesses import AzureMLHarness
from tests.support.mlflow_server import MlflowServer
from tests.support.stacks_job import (
    assert_dumps_in_the_log,
    last_checkpoint,
    ranks_shown,
    steps_of,
    wait_for_steps,
    write_script,
)
from tests.support.waiting import LOADED

pytestmark = pytest.mark.slow
__all__ = ["rig"]  # the workspace over HTTP, shared with the recovery tests


def stacks_job(root: Path, flag: Path, checkpoints: Path) -> Path:
    overrides = dict(o.split("=", 1) for o in AzureMLHarness.overrides)
    spec: dict[str, Any] = {
        "name": "azure-stacks",
        "code": {"dir": str(write_script(root / "code")), "entry": "train.py"},
        "resources": {"nodes": 2, "gpus_per_node": 0, "processes_per_node": 1},
        "checkpoint": {"enabled": False},
        "limits": {"max_recoveries": 0, "max_runtime": "10m"},
        "env": {
            "OMP_NUM_THREADS": "1",
            "STACKS_DONE_FLAG": str(flag),
            "CHECKPOINTS": str(checkpoints),
        },
        "azureml": {key.removeprefix("azureml."): value for key, value in overrides.items()},
    }
    path = root / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.timeout(LOADED)  # the stacks alone took 103 s beside another copy of the suite
def test_stacks_of_a_running_azure_job_show_every_rank_once_and_leave_it_running(
    rig: WorkspaceModel, mlflow_server: MlflowServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig.mlflow = mlflow_server
    monkeypatch.setenv("CLOUDDDP_AZUREML_POLL", "0.5")
    monkeypatch.setenv(POLL, "1")  # the rig's nodes take this machine's environment as their image's
    flag, checkpoints = tmp_path / "done", tmp_path / "checkpoints"
    checkpoints.mkdir()
    first = submitted(stacks_job(tmp_path, flag, checkpoints))
    nodes = AzureNodes(rig, first, tmp_path / "attempt1", Datastores(tmp_path / "blob"))
    run = Run.attach(first)

    def log() -> str:
        return "\n".join(line.text for line in run.logs())

    try:
        wait_for_steps(log, 2)
        shown = cli("stacks", first)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        print(f"\nazureml: {shown.stdout.splitlines()[0]}")
        assert shown.stdout.startswith("2 of 2 ranks gave their stacks in "), shown.stdout
        assert ranks_shown(shown.stdout) == [0, 1], shown.stdout  # each rank once, none twice
        assert "train.py:" in shown.stdout, shown.stdout

        again = json.loads(cli("stacks", first, "--json").stdout)  # a new request; the first's dumps not read again
        assert [r["rank"] for r in again["ranks"]] == [0, 1] and again["missing"] == {}, again
        assert [r["node"] for r in again["ranks"]] == ["0", "1"], again
        assert run.status().state is RunState.RUNNING
        twice = dict.fromkeys(range(2), 2)  # each rank asked once by each request, by its own node
        assert_dumps_in_the_log(run.logs, twice)
    finally:
        flag.touch()
        ended = nodes.finish(timeout=120)
    assert ended.ok, ended.describe()
    assert run.status().state is RunState.SUCCEEDED
    finished = steps_of(log())
    assert len(finished) == 2 and len(set(finished.values())) == 1, finished
    assert last_checkpoint(checkpoints) == finished[0], finished
    assert "Traceback" not in log()
