"""Each poll of a job's MLflow metrics reads what is new (and at most one page again), not every key's
whole history: a long run's polls stay as cheap as its first minute's. A real ``mlflow server``; the tracking
store's history call is wrapped only to count the points each poll transfers."""

from __future__ import annotations

import time
from typing import Any

import pytest

from cloudddp.backends.azureml.mlflow_metrics import PAGE, MlflowMetrics
from tests.support.mlflow_server import MlflowServer

pytestmark = pytest.mark.slow


def log(client: Any, run_id: str, steps: range) -> None:
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    batch = [Metric("loss", 1.0 / (s + 1), now + s, s) for s in steps]
    for at in range(0, len(batch), 1000):  # MLflow's log_batch takes at most 1000 metrics
        client.log_batch(run_id, metrics=batch[at : at + 1000])


def test_each_poll_transfers_only_what_is_new_and_one_page(mlflow_server: MlflowServer) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_server.url)
    run_id = client.create_run(client.create_experiment(f"paging-{time.time_ns()}")).info.run_id
    log(client, run_id, range(2 * PAGE + 500))
    reader = MlflowMetrics(mlflow_server.url)
    store = reader.client._tracking_client.store
    real = store.get_metric_history
    transferred: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        page = real(*args, **kwargs)
        transferred.append(len(page))
        return page

    store.get_metric_history = counted
    first = reader.new_records(run_id)
    assert [r.step for r in first] == list(range(2 * PAGE + 500))
    assert sum(transferred) == 2 * PAGE + 500 and len(transferred) == 3, transferred
    transferred.clear()
    log(client, run_id, range(2 * PAGE + 500, 2 * PAGE + 510))
    second = reader.new_records(run_id)
    assert [r.step for r in second] == list(range(2 * PAGE + 500, 2 * PAGE + 510))  # each point once
    assert sum(transferred) == 510, transferred  # the last page again and the new points, not 2510
    transferred.clear()
    assert reader.new_records(run_id) == [] and sum(transferred) == 510
