"""A job's metrics as Azure ML keeps them: in the job's MLflow run, read with MLflow's public client.

Azure ML gives every job an MLflow run whose id is the job's name, and sets ``MLFLOW_TRACKING_URI`` and
``MLFLOW_RUN_ID`` inside the job; what the training script logs there is what Studio charts. From outside,
Azure's documented way is ``MlflowClient`` at ``ml_client.workspaces.get(name).mlflow_tracking_uri``
(``azureml://<region>.api.azureml.ms/mlflow/...``), which needs the ``azureml-mlflow`` plugin for the
``azureml`` scheme: ``pip install 'cloudddp[azure-mlflow]'``. With the plugin installed, azure-ai-ml's
workspace entity registers the MLClient's credential for that URI (and moves it to ``/mlflow/v2.0`` for
mlflow 2 and 3), so the reads sign in as cloudddp does; the URI must come from that call in this process.
mlflow is imported here only, never on the render path.

Each poll asks for the run's metric keys (``get_run``) and each key's history, and returns only the points not
returned before. The history is read in pages (MLflow's REST ``metrics/get-history`` with ``max_results`` and
``page_token``, through the tracking store's own call): a key's next poll starts at the page where the last one
ended, so a long run's polls read only what is new plus one page, not the whole history each time. A store that
answers in one page without a token is read whole each poll, as before. Values logged together (one ``log_metrics``
call: the same step and timestamp) make one record; a metric named ``epoch`` is the record's epoch, as the metric-
line format has it (the shared script and the in-job launcher both log it so), and MLflow's step is the record's
step, unless the run's tag ``cloudddp.step`` is ``none``: the job declared no step, and MLflow's step only counts
its records (:mod:`cloudddp.injob.shim`), so the records say no step, as they do on every backend.
"""

from __future__ import annotations

import importlib.util
from collections import defaultdict
from typing import Any

from cloudddp.errors import BackendUnavailable, CloudDDPError
from cloudddp.injob.shim import STEP_TAG
from cloudddp.observe.metrics import MetricRecord

PAGE = 1000
"""Points per request for a key's history."""
INSTALL = "pip install 'cloudddp[azure-mlflow]' (mlflow and Microsoft's azureml-mlflow plugin)"


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


class MlflowMetrics:
    """New metric points of one MLflow run, poll after poll."""

    def __init__(self, tracking_uri: str) -> None:
        if not _installed("mlflow"):
            raise BackendUnavailable("reading Azure ML metrics needs mlflow", hint=INSTALL)
        if tracking_uri.startswith("azureml:") and not _installed("azureml.mlflow"):
            raise BackendUnavailable(
                "reading metrics from the workspace's azureml:// tracking URI needs the "
                "azureml-mlflow plugin (it registers that scheme)",
                hint=INSTALL,
            )
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=tracking_uri)
        self.seen: set[tuple[str, int, int, float]] = set()
        self.cursors: dict[str, tuple[str | None, int]] = {}
        """Per key: the token of the page the last poll ended in, and how many of that page's points it read."""

    @classmethod
    def of_workspace(cls, ml_client: Any, workspace: str) -> MlflowMetrics:
        """The reader at the tracking URI of workspace ``workspace``; a CloudDDPError saying why when there is none."""
        from azure.core.exceptions import AzureError

        try:
            found = ml_client.workspaces.get(workspace)
        except AzureError as e:
            raise CloudDDPError(f"the workspace's tracking URI could not be read: {str(e).splitlines()[0]}") from None
        return cls(tracking_uri(found))

    def new_records(self, run_id: str) -> list[MetricRecord]:
        """Records of the points logged since the last call, oldest first; none while the run does not exist."""
        from mlflow.exceptions import MlflowException

        try:
            run = self.client.get_run(run_id)
            steps = run.data.tags.get(STEP_TAG) != "none"
            points = [
                (key, m.step, m.timestamp, m.value) for key in sorted(run.data.metrics) for m in self._new(run_id, key)
            ]
        except MlflowException as e:
            if getattr(e, "error_code", "") == "RESOURCE_DOES_NOT_EXIST":
                return []
            raise CloudDDPError(f"cannot read the job's MLflow metrics: {str(e).splitlines()[0]}") from None
        fresh = [p for p in points if p not in self.seen]
        self.seen.update(fresh)
        return records(fresh, steps=steps)

    def _new(self, run_id: str, key: str) -> list[Any]:
        """The key's points from where the last poll ended (its last page, read again, less what was read)."""
        token, skip = self.cursors.get(key, (None, 0))
        out: list[Any] = []
        store = self.client._tracking_client.store  # MlflowClient has no paged history; its store has REST's
        while True:
            page = store.get_metric_history(run_id, key, max_results=PAGE, page_token=token)
            items = list(page)
            out += items[skip:]
            if not getattr(page, "token", None):
                self.cursors[key] = (token, len(items))
                return out
            token, skip = page.token, 0


def records(points: list[tuple[str, int, int, float]], *, steps: bool = True) -> list[MetricRecord]:
    """(key, step, timestamp ms, value) points as records: one per (step, timestamp), oldest first; without
    ``steps``, MLflow's step is only the records' order and no record has a step."""
    groups: dict[tuple[int, int], dict[str, float]] = defaultdict(dict)
    for key, step, timestamp, value in points:
        groups[(step, timestamp)][key] = value
    out = []
    for (step, timestamp), values in sorted(groups.items(), key=lambda item: (item[0][1], item[0][0])):
        epoch = values.pop("epoch", None)
        if not values:  # a position alone is no measurement
            continue
        out.append(
            MetricRecord(
                step=step if steps else None,
                epoch=int(epoch) if epoch is not None else None,
                time=timestamp / 1000,
                values=values,
                source="mlflow",
            )
        )
    return out


def tracking_uri(workspace: Any) -> str:
    """The workspace's MLflow tracking URI; an error when the workspace reports none."""
    uri = getattr(workspace, "mlflow_tracking_uri", None)
    if not uri:
        raise CloudDDPError(
            f"workspace {getattr(workspace, 'name', '')} reports no MLflow tracking URI, so its jobs' "
            "metrics cannot be read from here (Azure ML studio shows them)"
        )
    return str(uri)
