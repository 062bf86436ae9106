"""An attached ``cloudddp submit`` on Azure ML, through the CLI as a user runs it, against the workspace served
over HTTP (azure_rig.py) and the job run for real as Azure ML's nodes run it (azure_nodes.py), whose log files
are named as the runtime names them: ``user_logs/std_log_process_00.txt``, ``…_01``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.azure_launchers import Datastores
from tests.support.azure_nodes import AzureNodes
from tests.support.azure_rig import WorkspaceModel, create_container, serve, served_environment
from tests.support.cli import ROOT
from tests.support.harnesses import AzureMLHarness
from tests.support.mlflow_server import MlflowServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

HELLO = """import os
print(f"hello from rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} on node {os.environ['NODE_RANK']}")
"""


@pytest.fixture()
def rig(blob_endpoint: str, mlflow_server: MlflowServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkspaceModel]:
    model = WorkspaceModel(blob_endpoint)
    create_container(model)
    model.mlflow = mlflow_server
    with serve(model) as url:
        for key, value in served_environment(url, model).items():
            monkeypatch.setenv(key, value)
        yield model


@pytest.mark.timeout(240)
def test_an_attached_submit_of_two_nodes_by_two_processes_shows_rank_0_from_zero_padded_log_files(
    rig: WorkspaceModel, tmp_path: Path
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "hello.py").write_text(HELLO)
    spec: dict[str, Any] = {
        "name": "hello-ranks",
        "code": {"dir": str(code), "entry": "hello.py"},
        "resources": {"nodes": 2, "gpus_per_node": 0, "processes_per_node": 2},
        "azureml": {k.removeprefix("azureml."): v for k, v in (o.split("=", 1) for o in AzureMLHarness.overrides)},
    }
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(spec))
    submit = subprocess.Popen(
        [sys.executable, "-m", "cloudddp", "submit", str(job), "-b", "azureml", "-y"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
    )
    try:
        name = wait_until(lambda: next(iter(rig.jobs), None), 90, poll=0.1)
        ran = AzureNodes(rig, name, tmp_path / "nodes", Datastores(tmp_path / "blob")).finish(timeout=90)
        out, err = submit.communicate(timeout=90)
    finally:
        if submit.poll() is None:
            submit.kill()
            submit.wait()
    assert ran.ok, ran.describe()
    assert sorted(rig.log_files[name]) == [f"user_logs/std_log_process_0{rank}.txt" for rank in range(4)]
    assert submit.returncode == 0, err
    assert "[rank0] hello from rank 0 of 4 on node 0" in out, out + err
    assert "hello from rank 1" not in out and "hello from rank 3" not in out, out  # rank 0's output, by default
