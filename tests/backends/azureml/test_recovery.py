"""Recovery on Azure ML, through the real azure-ai-ml SDK against the offline workspace served over HTTP
(tests/support/azure_rig.py), so that the CLI and the detached watcher (other processes) reach it through
the backend's two extension points. The job runs for real (tests/support/azure_nodes.py): the shared
training script on digits, logging to the workspace's MLflow and checkpointing to the datastore folder
every attempt mounts. Nothing of cloudddp is stubbed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudddp.api import Run
from cloudddp.backends.status import Cause, RunState
from tests.support.azure_launchers import Datastores
from tests.support.azure_nodes import AzureNodes
from tests.support.azure_rig import WorkspaceModel, served_to_processes
from tests.support.cli import ROOT, cli
from tests.support.dataloader_saver import RUNNING, WORKER_KILLED, dataloader_saver_code, resumed, saved, sigterms
from tests.support.harnesses import AzureMLHarness
from tests.support.mlflow_server import MlflowServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture()
def rig(blob_endpoint: str, mlflow_server: MlflowServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkspaceModel]:
    with served_to_processes(blob_endpoint, mlflow_server, monkeypatch) as model:
        yield model


def spot_job(
    tmp_path: Path, name: str, args: list[str], code: Path = ROOT / "src_train", nodes: int = 1, processes: int = 1
) -> Path:
    """A low-priority CPU job of the shared training script (or the script in ``code``), recovered once."""
    overrides = dict(o.split("=", 1) for o in AzureMLHarness.overrides)
    spec: dict[str, Any] = {
        "name": name,
        "code": {"dir": str(code), "entry": "train.py", "args": args},
        "resources": {"nodes": nodes, "gpus_per_node": 0, "processes_per_node": processes, "spot": True},
        "checkpoint": {"every_epochs": 1, "resume": "auto"},
        "limits": {"max_recoveries": 1, "max_runtime": "10m"},
        "azureml": {key.removeprefix("azureml."): value for key, value in overrides.items()},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def submitted(path: Path) -> str:
    result = cli("submit", str(path), "-b", "azureml", "--detach", "--quiet", "-y")
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()  # the CLI has exited; the watcher goes on


@pytest.mark.timeout(480)
def test_a_preempted_low_priority_job_is_resubmitted_after_the_cli_exits_and_resumes_from_its_checkpoint(
    rig: WorkspaceModel, tmp_path: Path
) -> None:
    first = submitted(spot_job(tmp_path, "digits-spot", ["--dataset", "digits", "--model", "cnn", "--epochs", "4"]))
    assert rig.computes["cpu-cluster"]["properties"]["properties"]["vmPriority"] == "LowPriority"
    run, stores = Run.attach(first), Datastores(tmp_path / "blob")
    nodes = AzureNodes(rig, first, tmp_path / "attempt1", stores)
    try:  # once epoch 1 is checkpointed, Azure takes the nodes back
        wait_until(lambda: list(nodes.checkpoints.glob("ckpt-e0001-*.pt.sha256")), 180, poll=0.05)
        preempted = nodes.preempt()
    finally:
        nodes.stop()
    assert "stopping on SIGTERM" in preempted.logs[0], preempted.describe()

    second = wait_until(lambda: f"{first}-r2" in rig.jobs and f"{first}-r2", 60)
    assert rig.jobs[second]["properties"]["tags"]["cloudddp:attempt"] == "2"
    again = AzureNodes(rig, second, tmp_path / "attempt2", stores)
    finished = again.finish(timeout=240)
    assert finished.ok, finished.describe()
    assert again.checkpoints == nodes.checkpoints and "resumed from" in finished.logs[0], finished.describe()

    status = run.wait(timeout=60, poll=0.5)
    assert status.state is RunState.SUCCEEDED, status
    attempts = status.details["attempts"]
    assert [(a["run_id"], a["state"], a["cause"]) for a in attempts] == [
        (first, "failed", "preempted"),
        (second, "succeeded", None),
    ]
    assert "PreemptionError: Nodes of this job got pre-empted" in attempts[0]["reason"]
    # The chain's metric stream, from the two jobs' MLflow runs (which have steps, not epochs): every epoch's
    # evaluation exactly once, at the step each attempt's metric lines give for that epoch's end.
    ends = {r.epoch: r.step for attempt in (preempted, finished) for r in attempt.metrics() if "test_acc" in r.values}
    assert sorted(ends) == [1, 2, 3, 4]
    records = list(run.metrics())
    assert {r.source for r in records} == {"mlflow"}
    assert [r.step for r in records if "test_acc" in r.values] == [ends[epoch] for epoch in (1, 2, 3, 4)]
    shown = cli("status", first)
    assert shown.returncode == 0 and "preempted" in shown.stdout and second in shown.stdout, shown.stdout


@pytest.mark.timeout(300)
def test_a_preempted_own_script_with_dataloader_workers_on_2_nodes_saves_once_per_rank_and_its_recovery_resumes(
    rig: WorkspaceModel, tmp_path: Path
) -> None:
    args = ["--steps", "30", "--save-delay", "8"]  # a slow save, inside the eviction notice the rig gives (30 s)
    first = submitted(
        spot_job(tmp_path, "dataloader-spot", args, code=dataloader_saver_code(tmp_path), nodes=2, processes=2)
    )
    stores = Datastores(tmp_path / "blob")
    nodes = AzureNodes(rig, first, tmp_path / "attempt1", stores)
    preempted = nodes.preempt_once_logged(RUNNING)
    log = "\n".join(preempted.logs.values())
    assert sigterms(log) == {0: 1, 1: 1, 2: 1, 3: 1}, preempted.describe()  # once each, from its rank launcher
    assert not WORKER_KILLED.search(log), preempted.describe()
    (where,) = saved(log)

    second = wait_until(lambda: f"{first}-r2" in rig.jobs and f"{first}-r2", 60)
    finished = AzureNodes(rig, second, tmp_path / "attempt2", stores).finish(timeout=180)
    assert finished.ok, finished.describe()
    assert resumed("\n".join(finished.logs.values())) == {rank: where for rank in range(4)}, finished.describe()


@pytest.mark.timeout(300)
def test_a_failure_of_the_scripts_own_code_on_azure_ml_is_not_resubmitted(rig: WorkspaceModel, tmp_path: Path) -> None:
    first = submitted(spot_job(tmp_path, "digits-typo", ["--dataset", "digits", "--model", "no-such-model"]))
    finished = AzureNodes(rig, first, tmp_path / "attempt1", Datastores(tmp_path / "blob")).finish(timeout=120)
    assert not finished.ok and "invalid choice" in finished.logs[0], finished.describe()

    run = Run.attach(first)
    status = wait_until(lambda: (s := run.status()).details.get("recovery") != "watching" and s, 60)
    assert status.state is RunState.FAILED and [a["cause"] for a in status.details["attempts"]] == ["user error"]
    assert "not recovered" in status.message and "ExecutionFailed" in status.message
    assert list(rig.jobs) == [first]
    shown = cli("status", first)
    assert "not recovered" in shown.stdout and "user error" in shown.stdout, shown.stdout


def test_status_gives_the_cause_the_run_history_reports_and_cancelled_for_a_canceled_job(blob_endpoint: str) -> None:
    from tests.support.azure_rig import PREEMPTED

    harness = AzureMLHarness(blob_endpoint)
    backend, model = harness.backend, harness.model
    job = harness.launch()
    model.set_job_status(job, "Failed")
    st = backend.status(job)  # no error recorded (yet): unknown, and not kept
    assert st.cause is Cause.UNKNOWN and "gives no error yet" in st.message
    model.fail_job(job, PREEMPTED)
    st = backend.status(job)
    assert st.cause is Cause.PREEMPTED and st.message.startswith("AzureMLCompute job failed. PreemptionError")
    assert st.details["failure"]["code"] == "UserError"
    model.set_job_status(job, "Canceled")
    assert backend.status(job).cause is Cause.CANCELLED


@pytest.mark.timeout(480)
def test_an_eviction_without_any_signal_is_recovered_from_the_last_periodic_checkpoint(
    rig: WorkspaceModel, tmp_path: Path
) -> None:
    """Azure documents no signal before it takes low-priority nodes back: the processes are killed outright, so
    what the next attempt resumes from is the last checkpoint written on the cadence, not one saved on a stop."""
    first = submitted(spot_job(tmp_path, "digits-evict", ["--dataset", "digits", "--model", "cnn", "--epochs", "3"]))
    stores = Datastores(tmp_path / "blob")
    nodes = AzureNodes(rig, first, tmp_path / "attempt1", stores)
    try:
        wait_until(lambda: list(nodes.checkpoints.glob("ckpt-e0001-*.pt.sha256")), 180, poll=0.05)
        evicted = nodes.preempt(notice=0)  # SIGKILL, no SIGTERM
    finally:
        nodes.stop()
    assert "stopping on SIGTERM" not in evicted.logs[0] and evicted.returncodes[0] != 0, evicted.describe()

    second = wait_until(lambda: f"{first}-r2" in rig.jobs and f"{first}-r2", 60)
    finished = AzureNodes(rig, second, tmp_path / "attempt2", stores).finish(timeout=240)
    assert finished.ok, finished.describe()
    assert "resumed from" in finished.logs[0] and "ckpt-e000" in finished.logs[0], finished.describe()
    assert Run.attach(first).wait(timeout=60, poll=0.5).state is RunState.SUCCEEDED
