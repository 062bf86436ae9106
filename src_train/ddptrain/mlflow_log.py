"""Rank 0's metrics also go to MLflow when the environment names a tracking server (optional, lazy).

Azure ML sets ``MLFLOW_TRACKING_URI`` and ``MLFLOW_RUN_ID`` (the run it created for the job, which its
Studio charts): the values are logged into that run. Any other tracking server gets a new run, named
after ``CLOUDDDP_JOB_NAME`` (experiment from ``MLFLOW_EXPERIMENT_NAME``/``_ID`` as MLflow reads them),
which is ended when training ends. Without ``MLFLOW_TRACKING_URI``, or without the ``mlflow`` package,
nothing happens. Metric lines are printed either way: MLflow is a second copy, never the only one.

The calls run on a background thread: a slow or unreachable server never holds up training. Whatever is queued
when the thread is free goes in one ``log_batch`` call, so a server slower than the steps costs round trips, not a
backlog: one call per step fell 98 steps behind a fast CPU training on a loaded machine, and a stop's 5 s wait lost
them. The first failure prints one warning and turns MLflow off for the rest of the run.
"""

from __future__ import annotations

import importlib.util
import math
import os
import queue
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

_DONE = None  # queued by close(): log what is queued, end the run, stop
MOST_PER_CALL = 1000
"""Metrics in one ``log_batch`` call: MLflow's own limit."""
Entry = tuple[int, int, dict[str, float]]
"""A step, its time (ms since the epoch, as MLflow stamps), its values."""


class MlflowLogger:
    def __init__(self) -> None:
        self._owns_run = not os.environ.get("MLFLOW_RUN_ID")  # read now: mlflow.start_run() deletes it
        self._queue: queue.Queue[Entry | None] = queue.Queue()
        self._failed = False
        self._last_stamp = 0
        self._thread = threading.Thread(target=self._work, name="mlflow-metrics", daemon=True)
        self._thread.start()

    @classmethod
    def from_environment(cls) -> MlflowLogger | None:
        if not os.environ.get("MLFLOW_TRACKING_URI") or importlib.util.find_spec("mlflow") is None:
            return None
        return cls()

    def log(self, step: int, values: Mapping[str, float]) -> None:
        finite = {name: float(v) for name, v in values.items() if math.isfinite(float(v))}
        if finite and not self._failed:
            # one millisecond apart at least: values read back are one record per step and time, and two reports
            # of one step (a step's, then its epoch's end) often fall in the same millisecond
            self._last_stamp = max(int(time.time() * 1000), self._last_stamp + 1)
            self._queue.put((step, self._last_stamp, finite))

    def close(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the queued values to reach the server."""
        self._queue.put(_DONE)
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._warn(f"the tracking server did not take the last metrics within {timeout:.0f} s; left behind")

    def _work(self) -> None:
        mlflow = self._start()
        done = False
        while not done:
            entries = [self._queue.get()]
            while True:  # all that is queued by now goes in the same call
                try:
                    entries.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            done = _DONE in entries
            batch = [entry for entry in entries if entry is not None]
            if mlflow is None or self._failed or not batch:
                continue
            try:
                _send(mlflow, batch)
            except Exception as e:  # noqa: BLE001  # an optional logger never stops training
                self._fail(e)
        if mlflow is not None and self._owns_run and not self._failed:
            try:
                mlflow.end_run()
            except Exception as e:  # noqa: BLE001  # an optional logger never stops training
                self._fail(e)

    def _start(self) -> Any:
        """The mlflow module with a run active on this thread, or None after a warning. MLflow's own "View run at"
        lines are not printed: they would land in the job's output among the script's."""
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        try:
            import mlflow

            if mlflow.active_run() is None:
                mlflow.start_run(run_name=os.environ.get("CLOUDDDP_JOB_NAME") if self._owns_run else None)
            return mlflow
        except Exception as e:  # noqa: BLE001  # any failure of an optional logger: warn once, train on
            self._fail(e)
            return None

    def _fail(self, error: Exception) -> None:
        self._failed = True
        self._warn(
            f"logging failed ({type(error).__name__}: {str(error)[:300]}); metrics are still printed, "
            "MLflow is off for the rest of this run"
        )

    @staticmethod
    def _warn(message: str) -> None:
        print(f"warning: MLflow: {message}", file=sys.stderr, flush=True)


def _send(mlflow: Any, batch: list[Entry]) -> None:
    """``batch`` into the active run, in as few ``log_batch`` calls as MLflow allows."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    metrics = [Metric(name, value, stamp, step) for step, stamp, values in batch for name, value in values.items()]
    run_id = mlflow.active_run().info.run_id
    client = MlflowClient()
    for start in range(0, len(metrics), MOST_PER_CALL):
        client.log_batch(run_id, metrics=metrics[start : start + MOST_PER_CALL])
