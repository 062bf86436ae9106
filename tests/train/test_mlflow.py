"""The shared training script logs its metrics to MLflow (what Azure ML Studio charts): a real
``mlflow server``, real torchrun processes, and the values read back through MLflow's public client."""

from __future__ import annotations

import importlib.util
import json
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.cli import ROOT
from tests.support.mlflow_server import MlflowServer
from tests.support.ports import free_port
from tests.support.rigs import rig_unavailable
from tests.support.train_helpers import train

sys.path.insert(0, str(ROOT / "src_train"))
from ddptrain import metrics as script_metrics
from ddptrain import mlflow_log

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.slow
FAST = ["--dataset", "digits", "--batch-size", "128", "--checkpoint-every", "0"]


def printed(stdout: str) -> dict[str, list[tuple[int, float]]]:
    """name -> [(step, value)] from the metric lines, in the order printed."""
    series: dict[str, list[tuple[int, float]]] = {}
    for line in stdout.splitlines():
        if line.startswith(script_metrics.PREFIX):
            record = json.loads(line[len(script_metrics.PREFIX) :])
            for name, value in record.items():
                if name not in ("epoch", "step", "time"):
                    series.setdefault(name, []).append((record["step"], value))
    return series


def assert_logged_as_printed(client: MlflowClient, run_id: str, stdout: str) -> None:
    lines = printed(stdout)
    assert {"train_loss", "train_acc", "lr", "images_per_sec", "epoch_time", "test_loss", "test_acc"} <= set(lines)
    for name, values in lines.items():
        history = client.get_metric_history(run_id, name)
        logged = sorted((m.step, m.value) for m in history)
        assert [step for step, _ in logged] == sorted(step for step, _ in values), name
        # The lines round to 6 decimals; MLflow gets the values themselves.
        for (_, got), (_, want) in zip(logged, sorted(values), strict=True):
            assert got == pytest.approx(want, abs=1e-6), (name, logged, values)
    # The epoch keeps its name: a metric at each step a line was printed, with the line's epoch.
    epochs = {(m.step, int(m.value)) for m in client.get_metric_history(run_id, "epoch")}
    assert epochs == {(step, epoch) for step, epoch in printed_epochs(stdout)}, epochs


def printed_epochs(stdout: str) -> list[tuple[int, int]]:
    """(step, epoch) of each metric line."""
    found = []
    for line in stdout.splitlines():
        if line.startswith(script_metrics.PREFIX):
            record = json.loads(line[len(script_metrics.PREFIX) :])
            found.append((record["step"], record["epoch"]))
    return found


def test_two_ranks_log_every_printed_metric_into_the_run_the_platform_created(
    mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_server.url)
    experiment = client.create_experiment(f"platform-{uuid.uuid4().hex[:8]}")
    run_id = client.create_run(experiment).info.run_id  # what Azure ML does before the job starts
    result = train(
        2,
        *FAST,
        "--epochs",
        "3",
        "--log-every",
        "4",
        "--model-dir",
        str(tmp_path / "out"),
        cwd=tmp_path,
        env={"MLFLOW_TRACKING_URI": mlflow_server.url, "MLFLOW_RUN_ID": run_id},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "warning: MLflow" not in result.stderr, result.stderr[-3000:]
    assert len(printed(result.stdout)["test_acc"]) == 3
    assert_logged_as_printed(client, run_id, result.stdout)
    assert client.get_run(run_id).info.status == "RUNNING"  # the platform's run: the platform ends it
    assert len(client.search_runs([experiment])) == 1  # no second run was started


def test_without_a_run_id_the_logger_starts_a_run_named_after_the_job_and_ends_it(
    mlflow_server: MlflowServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    experiment_name = f"own-{uuid.uuid4().hex[:8]}"
    for name, value in {
        "MLFLOW_TRACKING_URI": mlflow_server.url,
        "MLFLOW_EXPERIMENT_NAME": experiment_name,
        "CLOUDDDP_JOB_NAME": "digits-mlflow",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    logger = mlflow_log.MlflowLogger.from_environment()
    assert logger is not None
    logger.log(5, {"train_loss": 0.75, "lr": 0.1})
    logger.log(10, {"train_loss": 0.5, "test_acc": float("nan")})  # printed as null; not sent
    logger.close(timeout=60)
    client = MlflowClient(tracking_uri=mlflow_server.url)
    experiment = client.get_experiment_by_name(experiment_name)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert [(r.info.run_name, r.info.status) for r in runs] == [("digits-mlflow", "FINISHED")]
    run_id = runs[0].info.run_id
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "train_loss")] == [(5, 0.75), (10, 0.5)]
    assert client.get_metric_history(run_id, "test_acc") == []


def test_an_unreachable_tracking_server_gives_one_warning_and_nothing_waits_on_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    if importlib.util.find_spec("mlflow") is None:
        rig_unavailable("mlflow is not installed (it is in the dev extra)")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    logger = mlflow_log.MlflowLogger.from_environment()
    assert logger is not None
    for step in range(1, 4):
        logger.log(step, {"train_loss": 1.0 / step})
    logger.close(timeout=60)
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning: MLflow" in line]
    assert len(warnings) == 1 and "metrics are still printed" in warnings[0], warnings


def test_nothing_changes_without_a_tracking_uri_or_without_mlflow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert mlflow_log.MlflowLogger.from_environment() is None
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1")
    real_find_spec = mlflow_log.importlib.util.find_spec
    monkeypatch.setattr(
        mlflow_log.importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real_find_spec(name, *a)
    )
    assert mlflow_log.MlflowLogger.from_environment() is None
