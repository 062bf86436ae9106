"""One meaning for metrics, log tags and the SDKs' noise on Azure ML: an attached ``cloudddp submit`` of a 2-node ×
2-process job whose every rank prints the same measurement (tests/support/ranks.py), against the workspace served
over HTTP (azure_rig.py), the job run for real as Azure ML's nodes run it (azure_nodes.py) and its metrics in the
MLflow server. The attached view shows rank 0's lines and records, the same records ``metrics --json`` reads from
MLflow; every line of the program names its global rank; the SDKs' own messages are not on the terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.backends.azureml.test_attached_submit import rig
from tests.support import ranks
from tests.support.azure_launchers import Datastores
from tests.support.azure_nodes import AzureNodes
from tests.support.azure_rig import WorkspaceModel
from tests.support.cli import ROOT, cli
from tests.support.harnesses import AzureMLHarness
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow
__all__ = ["rig"]  # the served workspace, shared with the attached submit's test


@pytest.mark.timeout(300)
def test_an_attached_two_by_two_submit_shows_rank_0s_records_as_mlflow_has_them_and_tags_every_line(
    rig: WorkspaceModel, tmp_path: Path
) -> None:
    azureml: dict[str, Any] = {
        k.removeprefix("azureml."): v for k, v in (o.split("=", 1) for o in AzureMLHarness.overrides)
    }
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(ranks.job(tmp_path, azureml=azureml)))
    home = tmp_path / "home"
    env = {**os.environ, "COLUMNS": "200", "CLOUDDDP_HOME": str(home)}
    submit = subprocess.Popen(
        [sys.executable, "-m", "cloudddp", "submit", str(job), "-b", "azureml", "-y"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        name = wait_until(lambda: next(iter(rig.jobs), None), 90, poll=0.1)
        ran = AzureNodes(rig, name, tmp_path / "nodes", Datastores(tmp_path / "blob")).finish(timeout=120)
        out, err = submit.communicate(timeout=120)
    finally:
        if submit.poll() is None:
            submit.kill()
            submit.wait()
    assert ran.ok, ran.describe()
    assert submit.returncode == 0, err
    metrics = cli("metrics", name, "--json", env={"CLOUDDDP_HOME": str(home)})
    assert metrics.returncode == 0, metrics.stderr
    ranks.check_attached(out, metrics.stdout, "rank0")
    logs = cli("logs", name, "--json", env={"CLOUDDDP_HOME": str(home)})
    assert logs.returncode == 0, logs.stderr
    ranks.check_tagged_json(logs.stdout)
    # The SDKs' own words are in the log file the submit named, not on the terminal.
    for noise in ("Proceeding with no tenant id", "experimental class", "View run", "Uploading "):
        assert noise not in err and noise not in out, err
    sdk_log = home / "logs" / "sdk.log"
    assert "Proceeding with no tenant id" in sdk_log.read_text()  # said, and kept there
    assert err.count(str(sdk_log)) == 1, err  # named once
    assert "experimental class" not in logs.stderr + metrics.stderr  # the run commands are as quiet
