"""A workspace whose tracking URI is ``azureml://`` (as every real workspace's is) has its MLflow metrics
read through azureml-mlflow's own plugin: azure-ai-ml hands the plugin the MLClient's credential for that URI, and
the ``azureml`` scheme's store signs each request with it, over HTTPS to the workspace's MLflow
(tests/support/azureml_tracking.py: a TLS front on a real ``mlflow server``). The plugin pins mlflow-skinny<=3.15,
which the dev extra's mlflow server does not meet, so the reading ``cloudddp`` runs from its own environment
(``.venv-azureml-mlflow``, made by ``make test``), as a user with ``.[azure,azure-mlflow]`` would run it."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.azure_rig import WorkspaceModel, create_container, serve, served_environment
from tests.support.azureml_tracking import azureml_tracking
from tests.support.cli import ROOT, cli
from tests.support.harnesses import AzureMLHarness
from tests.support.mlflow_server import MlflowServer
from tests.support.rigs import rig_unavailable

pytestmark = pytest.mark.slow
PLUGIN_PYTHON = ROOT / ".venv-azureml-mlflow" / "bin" / "python"


@pytest.fixture()
def rig(blob_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[WorkspaceModel, dict[str, str]]]:
    if not PLUGIN_PYTHON.exists():
        rig_unavailable(f"{PLUGIN_PYTHON} is missing: `make test` makes it (cloudddp with .[azure,azure-mlflow])")
    model = WorkspaceModel(blob_endpoint)
    create_container(model)
    with serve(model) as url:
        environment = served_environment(url, model)
        for key, value in environment.items():
            monkeypatch.setenv(key, value)
        yield model, environment


def test_metrics_of_an_azureml_tracking_uri_come_through_the_plugin(
    rig: tuple[WorkspaceModel, dict[str, str]], mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    model, environment = rig
    model.mlflow = mlflow_server
    with azureml_tracking(mlflow_server.url, tmp_path) as tracking:
        model.tracking_uri = tracking.uri
        project = tmp_path / "proj"
        assert cli("init", str(project), "--name", "plugin").returncode == 0
        overrides = [*AzureMLHarness.overrides, "azureml.compute=null"]
        submitted = cli(
            "submit", str(project / "job.yaml"), "-b", "azureml", "--detach", "--quiet", "-y",
            *[a for o in overrides for a in ("-o", o)],
        )  # fmt: skip
        assert submitted.returncode == 0, submitted.stderr
        run_id = submitted.stdout.strip()
        client = MlflowClient(tracking_uri=mlflow_server.url)  # the job's rank 0 logging to its MLflow run
        for step, loss in [(1, 0.9), (2, 0.5), (3, 0.25)]:
            client.log_metric(run_id, "loss", loss, step=step)
        model.set_job_status(run_id, "Completed")
        read = subprocess.run(
            [str(PLUGIN_PYTHON), "-m", "cloudddp", "metrics", "--json", run_id],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=180,
            env={**os.environ, **environment, **tracking.environment},
        )
    assert read.returncode == 0, read.stderr[-3000:]
    records = [json.loads(line) for line in read.stdout.splitlines()]
    assert [(r["step"], r["loss"]) for r in records] == [(1, 0.9), (2, 0.5), (3, 0.25)], (
        records,
        read.stderr,
        tracking.served,
    )
    assert "cannot be read" not in read.stderr, read.stderr
    # The plugin's path: MLflow calls signed with the workspace credential's token, through the HTTPS front.
    assert tracking.served.counts["mlflow"] >= 2, tracking.served
    assert tracking.served.counts["unauthorized"] == 0, tracking.served
