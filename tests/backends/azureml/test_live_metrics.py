"""``cloudddp metrics -f`` of the ``init`` template (a script that only prints metric lines) on Azure ML shows its
lines while the job runs, whatever the workspace's MLflow is: a server whose run the script leaves empty, an
``azureml://`` tracking URI that this install cannot read (no azureml-mlflow plugin), or none. The job runs for
real in the rig (tests/support/azure_nodes.py) and the CLI reads it over HTTP; nothing of cloudddp is stubbed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.azure_launchers import Datastores
from tests.support.azure_nodes import AzureNodes
from tests.support.azure_rig import WorkspaceModel, create_container, serve, served_environment
from tests.support.cli import ROOT, cli
from tests.support.harnesses import AzureMLHarness
from tests.support.mlflow_server import MlflowServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow
AZUREML_URI = (
    "azureml://eastus.api.azureml.ms/mlflow/v1.0/subscriptions/00000000-0000-0000-0000-000000000000/"
    "resourceGroups/ml-rg/providers/Microsoft.MachineLearningServices/workspaces/ml-workspace"
)


@pytest.fixture()
def rig(blob_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkspaceModel]:
    model = WorkspaceModel(blob_endpoint)
    create_container(model)
    with serve(model) as url:
        for key, value in served_environment(url, model).items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("CLOUDDDP_AZUREML_POLL", "0.3")
        yield model


class Follower:
    """``cloudddp metrics -f --json RUN`` in its own process, its records and stderr collected as they come."""

    def __init__(self, run_id: str) -> None:
        self.records: list[dict[str, object]] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cloudddp", "metrics", "-f", "--json", run_id],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ),
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.records.append(json.loads(line))

    def finish(self) -> str:
        self.proc.wait(timeout=60)
        self._reader.join(timeout=10)
        assert self.proc.stderr is not None
        return self.proc.stderr.read()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mlflow", ["server", "azureml-uri", "none"])
def test_metrics_follow_shows_the_init_templates_lines_live_with_and_without_mlflow(
    rig: WorkspaceModel, mlflow_server: MlflowServer, tmp_path: Path, mlflow: str
) -> None:
    if mlflow == "server":
        rig.mlflow = mlflow_server
    elif mlflow == "azureml-uri":
        rig.tracking_uri = AZUREML_URI
    project = tmp_path / "proj"
    assert cli("init", str(project), "--name", f"live-{mlflow}").returncode == 0
    overrides = [*AzureMLHarness.overrides, "azureml.compute=null", "code.args=[--epochs, '4']"]
    submitted = cli(
        "submit",
        str(project / "job.yaml"),
        "-b",
        "azureml",
        "--detach",
        "--quiet",
        "-y",
        *[a for o in overrides for a in ("-o", o)],
    )
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip()
    nodes = AzureNodes(rig, run_id, tmp_path / "nodes", Datastores(tmp_path / "blob"))
    follower = Follower(run_id)
    try:
        wait_until(lambda: len(follower.records) == 4, timeout=120, poll=0.1)
        # Every epoch shown while the job still runs: the follower has not ended, the job is not Completed.
        assert follower.proc.poll() is None and rig.jobs[run_id]["properties"]["status"] == "Running"
    finally:
        finished = nodes.finish(timeout=120)
    assert finished.ok, finished.describe()
    stderr = follower.finish()
    assert follower.proc.returncode == 0, stderr
    assert [r["epoch"] for r in follower.records] == [1, 2, 3, 4], follower.records  # each once
    assert all(isinstance(r.get("loss"), float) for r in follower.records), follower.records
    if mlflow != "server":
        assert "metrics from the job's log lines (its MLflow run cannot be read here" in stderr, stderr
