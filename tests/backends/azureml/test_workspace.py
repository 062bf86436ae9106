"""What cloudddp does to a workspace and reads back from it, through the real azure-ai-ml SDK against the
offline workspace (tests/support/azure_rig.py): an existing cluster is grown by its max_instances only and
its tier is compared with the job's; logs are read a few new bytes at a time; metrics come back from the
job's MLflow run on a real ``mlflow server``, logged there by the shared script's own reporter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from click.testing import CliRunner

import cloudddp.api
from cloudddp.api import Run
from cloudddp.backends.azureml import AzureMLBackend
from cloudddp.backends.plugins import load_spec
from cloudddp.cli.app import app
from cloudddp.errors import CloudDDPError, UserError
from tests.support.azure_rig import (
    ACCOUNT_URL,
    SUB,
    WS_PATH,
    FakeCredential,
    WorkspaceModel,
    rest_example,
    serve,
    served_environment,
)
from tests.support.azure_rig import (
    rig_backend as backend,
)
from tests.support.cli import ROOT, cli
from tests.support.mlflow_server import MlflowServer

pytestmark = pytest.mark.slow
AZURE_JOB = ROOT / "jobs" / "cifar10-azureml.yaml"
SUBNET = f"/subscriptions/{SUB}/resourceGroups/net-rg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/ml"
USER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOwnerskey owner@laptop"


class Steps:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def step(self, description: str) -> None:
        self.lines.append(description)

    def advance(self, description: str, done: int, total: int | None) -> None:
        self.lines.append(description)


def users_cluster(model: WorkspaceModel, *, tier: str = "Dedicated", max_nodes: int = 2) -> dict[str, Any]:
    """A cluster its owner made by hand: in a subnet, with an identity, SSH and a warm node."""
    model.computes["gpu-cluster"] = {
        "id": f"{WS_PATH}/computes/gpu-cluster",
        "name": "gpu-cluster",
        "location": "eastus",
        "type": "Microsoft.MachineLearningServices/workspaces/computes",
        "identity": {"type": "SystemAssigned", "principalId": "p-1", "tenantId": "t-1"},
        "properties": {
            "computeType": "AmlCompute",
            "provisioningState": "Succeeded",
            "properties": {
                "vmSize": "Standard_ND96asr_v4",
                "vmPriority": tier,
                "subnet": {"id": SUBNET},
                "scaleSettings": {"maxNodeCount": max_nodes, "minNodeCount": 1, "nodeIdleTimeBeforeScaleDown": "PT1H"},
                "userAccountCredentials": {"adminUserName": "owner", "adminUserSshPublicKey": USER_KEY},
                "remoteLoginPortPublicAccess": "Enabled",
                "enableNodePublicIp": False,
            },
        },
    }
    return json.loads(json.dumps(model.computes["gpu-cluster"]))


def test_growing_an_existing_cluster_changes_its_max_instances_and_nothing_else(model: WorkspaceModel) -> None:
    before = users_cluster(model)
    steps = Steps()
    b = backend(model, "grow")
    b.launch(b.render(load_spec(AZURE_JOB, ["resources.nodes=3"])), progress=steps, checks=False)

    assert not [c for c in model.calls if c[0] == "PUT" and "/computes/" in c[1]], "no PUT of the cluster"
    assert len(model.compute_updates) == 1
    name, body = model.compute_updates[0]
    assert name == "gpu-cluster" and list(body) == ["properties"] and list(body["properties"]) == ["properties"]
    assert list(body["properties"]["properties"]) == ["scaleSettings"]  # the request carried the scale settings only
    sent = body["properties"]["properties"]["scaleSettings"]
    had = before["properties"]["properties"]["scaleSettings"]
    assert sent["maxNodeCount"] == 4  # the rendered maximum (azureml.max_nodes)
    assert sent["minNodeCount"] == had["minNodeCount"] == 1  # sent as it was: left out, it would default to 0
    assert sent["nodeIdleTimeBeforeScaleDown"] == "PT3600S"  # the owner's hour, unchanged
    after = model.computes["gpu-cluster"]
    assert after["properties"]["properties"]["subnet"] == {"id": SUBNET}
    assert after["identity"] == before["identity"]
    assert after["properties"]["properties"]["userAccountCredentials"]["adminUserSshPublicKey"] == USER_KEY
    assert after["properties"]["properties"]["remoteLoginPortPublicAccess"] == "Enabled"
    assert any("growing cluster gpu-cluster: max_instances 2 -> 4 (nothing else changes)" in s for s in steps.lines)

    again = backend(model, "grow-again")
    again.launch(again.render(load_spec(AZURE_JOB, ["resources.nodes=3"])), checks=False)
    assert len(model.compute_updates) == 1  # big enough now: left alone


def test_growing_a_cluster_without_computes_write_says_which_permission_and_the_serverless_way(
    model: WorkspaceModel,
) -> None:
    """A role without computes/write (the AzureML Data Scientist role) gets 403 on the grow's PATCH as on a
    creation: said with the permission and the ways out, exit 2, no job submitted."""
    users_cluster(model)
    model.compute_write = False
    b = backend(model, "grow-403")
    with pytest.raises(UserError) as refused:
        b.launch(b.render(load_spec(AZURE_JOB, ["resources.nodes=3"])), checks=False)
    said = str(refused.value) + str(refused.value.hint)
    assert refused.value.exit_code == 2 and said.startswith("growing cluster gpu-cluster needs")
    assert "workspaces/computes/write" in said and "serverless" in said and not model.jobs


def test_growing_a_cluster_waits_for_succeeded_when_the_patch_answers_200_with_an_async_operation(
    model: WorkspaceModel,
) -> None:
    """The PATCH is answered as ``Compute/patch.json`` answers it (200, ``Updating``, ``Azure-AsyncOperation``); its
    operation answers InProgress three times. The job is submitted only after it answered Succeeded."""
    assert rest_example("compute_patch")["status"] == 200  # the example the rig answers with
    users_cluster(model)
    model.update_polls = 3
    steps = Steps()
    b = backend(model, "grow-200")
    b.launch(b.render(load_spec(AZURE_JOB, ["resources.nodes=3"])), progress=steps, checks=False)

    polls = [
        i for i, (method, path) in enumerate(model.calls) if method == "GET" and "/operations/compute-update-" in path
    ]
    submitted = next(i for i, (method, path) in enumerate(model.calls) if method == "PUT" and "/jobs/" in path)
    assert len(polls) == 4 and polls[-1] < submitted  # InProgress ×3, then Succeeded, then the job
    cluster = model.computes["gpu-cluster"]["properties"]
    assert cluster["provisioningState"] == "Succeeded" and cluster["properties"]["scaleSettings"]["maxNodeCount"] == 4
    waiting = [s for s in steps.lines if s.startswith("growing cluster gpu-cluster: InProgress")]
    assert len(waiting) == 3 and any(s.startswith("cluster gpu-cluster grown") for s in steps.lines), steps.lines


def test_a_cluster_update_that_fails_stops_the_submit_naming_the_cluster(model: WorkspaceModel) -> None:
    users_cluster(model)
    model.update_polls = 1
    b = backend(model, "grow-fails")
    model.update_outcome = "Failed"
    with pytest.raises(CloudDDPError, match="growing cluster gpu-cluster ended Failed"):
        b.launch(b.render(load_spec(AZURE_JOB, ["resources.nodes=3"])), checks=False)
    assert not [c for c in model.calls if c[0] == "PUT" and "/jobs/" in c[1]], "no job sent to a cluster that failed"


SUBNET_FULL = {"code": "BadRequest", "message": "Subnet ml has 0 free IP addresses; the cluster needs 4."}


def test_a_cluster_whose_creation_ends_failed_stops_the_submit_and_says_what_to_do(
    model: WorkspaceModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the CLI as a user runs it: the creation's operation ends ``Failed`` with Azure's error; the submit exits
    1 naming the cluster, the error and the fix, with no traceback and no job or code sent. Azure keeps the failed
    cluster: the next submit finds it ``Failed`` and says so instead of sending a job that would never start."""
    model.create_error = SUBNET_FULL
    with serve(model) as url:
        for key, value in {**served_environment(url, model), "CLOUDDDP_AZUREML_POLL": "0.2"}.items():
            monkeypatch.setenv(key, value)
        first = cli("submit", str(AZURE_JOB), "-b", "azureml", "--detach", "-y")
        again = cli("submit", str(AZURE_JOB), "-b", "azureml", "--detach", "-y")
    assert first.returncode == 1 and "Traceback" not in first.stderr, first.stderr
    assert "creating cluster gpu-cluster ended Failed: (BadRequest) Subnet ml has 0 free IP addresses" in first.stderr
    assert "az ml compute delete --name gpu-cluster" in first.stderr, first.stderr
    assert model.computes["gpu-cluster"]["properties"]["provisioningState"] == "Failed"
    assert again.returncode == 1 and "Traceback" not in again.stderr, again.stderr
    assert "cluster gpu-cluster is in state Failed (BadRequest): a job sent to it would never start" in again.stderr
    assert [c for c in model.calls if c[0] == "PUT" and "/computes/" in c[1]] == [
        ("PUT", f"{WS_PATH}/computes/gpu-cluster")
    ]
    assert not [c for c in model.calls if "/jobs/" in c[1] and c[0] == "PUT"] and model.pending_uploads == 0


@pytest.mark.parametrize(
    ("tier", "spot", "says"),
    [
        ("Dedicated", True, "cluster gpu-cluster is dedicated but the job asks for spot"),
        ("LowPriority", False, "cluster gpu-cluster is low priority but the job is not spot"),
    ],
)
def test_a_cluster_of_the_other_tier_runs_the_job_with_a_warning_naming_the_cluster_to_use(
    model: WorkspaceModel, tier: str, spot: bool, says: str
) -> None:
    users_cluster(model, tier=tier, max_nodes=4)
    steps = Steps()
    b = backend(model, f"tier-{str(spot).lower()}")
    name = b.launch(b.render(load_spec(AZURE_JOB, [f"resources.spot={str(spot).lower()}"])), progress=steps)
    warnings = [s for s in steps.lines if s.startswith("warning:")]
    assert len(warnings) == 1 and says in warnings[0], steps.lines
    assert "azureml.compute=gpu-cluster-" in warnings[0]
    assert name in model.jobs and not model.compute_updates
    same = backend(model, f"same-{str(spot).lower()}")
    quiet = Steps()
    same.launch(same.render(load_spec(AZURE_JOB, [f"resources.spot={str(not spot).lower()}"])), progress=quiet)
    assert not [s for s in quiet.lines if s.startswith("warning:")]


def test_following_logs_reads_only_the_bytes_added_since_the_last_poll(model: WorkspaceModel) -> None:
    b = backend(model, "logs")
    name = b.launch(b.render(load_spec(AZURE_JOB)))
    model.set_job_status(name, "Running")
    first = "starting rank 0\n"
    model.write_log(name, 0, first)
    forwarder = ml_transport_forwarder(b)
    seen: list[str] = []
    follower = threading.Thread(target=lambda: seen.extend(line.text for line in b.logs(name, follow=True)))
    follower.start()
    wait_for(lambda: "starting rank 0" in seen)
    model.write_log(name, 0, "epoch 1 done\nhalf a li")
    wait_for(lambda: "epoch 1 done" in seen)
    # The half line came in the same read as "epoch 1 done" (one write, one ranged read: checked below), so the
    # follower has had it in hand: a line without its newline waits for the rest.
    assert "half a li" not in seen
    model.write_log(name, 0, "ne\n")
    wait_for(lambda: "half a line" in seen)
    model.set_job_status(name, "Completed")
    follower.join(timeout=30)
    assert seen == ["starting rank 0", "epoch 1 done", "half a line"]
    reads = [r for path, r in forwarder.ranges if path.endswith("/std_log_process_00.txt")]
    starts = [int(r.removeprefix("bytes=").split("-")[0]) for r in reads]
    assert starts == [0, len(first), len(first) + len("epoch 1 done\nhalf a li")], reads


def ml_transport_forwarder(b: AzureMLBackend) -> Any:
    return b.transport.session.adapters[ACCOUNT_URL]


def wait_for(condition: Any, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


RANK0 = """
import sys
sys.path.insert(0, sys.argv[1])
from ddptrain.metrics import Reporter
from ddptrain.mlflow_log import MlflowLogger

report = Reporter(MlflowLogger.from_environment())
for epoch in (1, 2):
    for step in (epoch * 10 - 5, epoch * 10):
        report(step, epoch, train_loss=2.0 / step, lr=0.1 * epoch)
    report(epoch * 10, epoch, test_acc=0.4 + 0.25 * epoch)
report.close(120)
"""
"""The shared script's rank 0, cut to its reports. Its close waits 120 s, not the script's 30: a real training's
logger imports mlflow and starts its run while the epochs run, and here that comes within the wait (over 30 s on a
machine running two suites at once)."""


def run_rank0(job: str, mlflow: MlflowServer) -> str:
    """Rank 0 of the job as Azure ML starts it (MLFLOW_TRACKING_URI and MLFLOW_RUN_ID set), reporting with the
    shared script's own Reporter and MLflow logger; its output, for the job's log file."""
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": mlflow.url,
        "MLFLOW_RUN_ID": job,
        "CLOUDDDP_JOB_NAME": "cifar10-azureml",
    }
    done = subprocess.run(
        [sys.executable, "-c", RANK0, str(ROOT / "src_train")], env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0 and "warning: MLflow" not in done.stderr, done.stderr[-3000:]
    return done.stdout


def test_metrics_logged_to_the_jobs_mlflow_run_come_back_through_run_metrics_and_the_cli(
    model: WorkspaceModel, mlflow_server: MlflowServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    model.mlflow = mlflow_server
    b = backend(model, "mlflow", poll=0.3)
    name = b.launch(b.render(load_spec(AZURE_JOB)))
    model.set_job_status(name, "Running")
    live: list[Any] = []
    follower = threading.Thread(target=lambda: live.extend(b.metrics(name, follow=True)))
    follower.start()
    printed = run_rank0(name, mlflow_server)  # its MLflow logger has flushed when it returns
    model.write_log(name, 0, printed)
    wait_for(lambda: len(points(live)) == 10)
    model.set_job_status(name, "Completed")
    follower.join(timeout=60)
    assert not follower.is_alive()

    client = MlflowClient(tracking_uri=mlflow_server.url)
    points_logged = [(key, m) for key in ("train_loss", "lr", "test_acc") for m in client.get_metric_history(name, key)]
    history = {
        key: sorted((m.step, m.value) for k, m in points_logged if k == key) for key in ("train_loss", "lr", "test_acc")
    }
    assert history["test_acc"] == [(10, pytest.approx(0.65)), (20, pytest.approx(0.9))]  # it reached the server
    records = list(Run.attach(name, "azureml", credential=FakeCredential(), transport=b.transport).metrics())
    assert all(r.source == "mlflow" for r in records)
    from_records = {key: sorted((r.step, r.values[key]) for r in records if key in r.values) for key in history}
    assert from_records == history
    assert [r.step for r in records] == sorted(r.step for r in records)  # oldest first
    assert len(records) == len({(m.step, m.timestamp) for _, m in points_logged})  # one per (step, time) logged
    assert points(live) == points(records) and len(points(live)) == 10  # followed: every point, each once

    monkeypatch.setattr(cloudddp.api, "get_backend", lambda name_, **kw: backend(model, "cli"))
    result = CliRunner().invoke(app, ["metrics", name, "--json"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert [(d["step"], d.get("test_acc")) for d in lines if "test_acc" in d] == [
        (10, pytest.approx(0.65)),
        (20, pytest.approx(0.9)),
    ]
    assert len(lines) == len(records)


def points(records: list[Any]) -> list[tuple[int, str, float]]:
    return sorted((r.step, key, value) for r in records for key, value in r.values.items())


def test_a_run_that_logged_nothing_to_mlflow_has_its_metric_lines_read(
    model: WorkspaceModel, mlflow_server: MlflowServer
) -> None:
    model.mlflow = mlflow_server
    b = backend(model, "lines")
    name = b.launch(b.render(load_spec(AZURE_JOB)))
    model.write_log(name, 0, 'CLOUDDDP_METRIC {"epoch":1,"step":10,"time":1.0,"train_loss":0.42}\n')
    model.set_job_status(name, "Completed")
    records = list(b.metrics(name))
    assert [(r.epoch, r.step, r.values) for r in records] == [(1, 10, {"train_loss": 0.42})]
    assert records[0].source == "rank0"


def test_without_a_tracking_uri_reader_the_metrics_verb_reads_the_logs_and_names_the_extra_to_install(
    model: WorkspaceModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cloudddp.backends.azureml import mlflow_metrics

    model.tracking_uri = "azureml://eastus.api.azureml.ms/mlflow/v1.0" + WS_PATH
    b = backend(model, "plugin")
    name = b.launch(b.render(load_spec(AZURE_JOB)))
    model.write_log(name, 0, 'CLOUDDDP_METRIC {"epoch":1,"loss":0.5}\n')
    monkeypatch.setattr(mlflow_metrics, "_installed", lambda module: module != "azureml.mlflow")
    with pytest.warns(UserWarning, match=r"log lines .*azureml-mlflow plugin[\s\S]*cloudddp\[azure-mlflow\]"):
        records = list(b.metrics(name))
    assert [(r.epoch, r.values) for r in records] == [(1, {"loss": 0.5})]


def test_the_logs_are_where_the_jobs_default_output_says_else_where_azure_ml_keeps_them() -> None:
    from types import SimpleNamespace

    from cloudddp.backends.azureml.logs import log_location

    told = SimpleNamespace(
        name="j1", outputs={"default": SimpleNamespace(path="azureml://datastores/other/paths/a/b/")}
    )
    assert log_location(told) == ("other", "a/b")
    service = SimpleNamespace(
        name="j1",
        outputs={"default": SimpleNamespace(path="azureml://datastores/workspaceartifactstore/ExperimentRun/dcid.j1")},
    )
    assert log_location(service) == ("workspaceartifactstore", "ExperimentRun/dcid.j1")
    assert log_location(SimpleNamespace(name="j2", outputs={})) == ("workspaceartifactstore", "ExperimentRun/dcid.j2")


def test_a_mixed_case_spec_name_is_the_name_the_job_gets(model: WorkspaceModel) -> None:
    """azure-ai-ml's load_job lower-cases job names: the rendered name (the run id) is lower-case already."""
    b = backend(model, "Mixed")
    plan = b.render(load_spec(AZURE_JOB, ["name=CIFAR10-Run"]))
    assert plan.job_name.startswith("cifar10-run-") and plan.job_name.endswith("-mixed")
    name = b.launch(plan)
    assert name == plan.job_name and list(model.jobs) == [name]
    assert b.status(name).name == "CIFAR10-Run"  # the display name keeps the spec's spelling
