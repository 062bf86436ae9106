"""Metric lines: rank 0 prints one line per measurement, which every backend streams back.

    CLOUDDDP_METRIC {"epoch":3,"step":120,"time":1795345221.24,"train_loss":0.41,"lr":0.05}

Compact JSON (no spaces), so a SageMaker MetricDefinition such as
``CLOUDDDP_METRIC .*"test_acc":(-?[0-9]+(?:\\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)`` captures a value.
``step`` is the global optimizer step, ``epoch`` the 1-based epoch the values belong to, ``time`` the
Unix time the line was written. This file must stay in step with ``cloudddp/observe/metrics.py`` (a test
checks it); it cannot import cloudddp because it runs inside stock cloud images.

:class:`Reporter` prints the lines and hands the same values to MLflow when the environment names a
tracking server (mlflow_log.py).
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .mlflow_log import MlflowLogger

PREFIX = "CLOUDDDP_METRIC "


def format_metric_line(step: int, epoch: int, **values: float) -> str:
    record: dict[str, float | None] = {"epoch": epoch, "step": step, "time": round(time.time(), 4)}
    for name, value in values.items():
        value = float(value)
        record[name] = round(value, 6) if math.isfinite(value) else None
    return PREFIX + json.dumps(record, separators=(",", ":"))


def emit(step: int, epoch: int, **values: float) -> None:
    print(format_metric_line(step, epoch, **values), flush=True)
    sys.stdout.flush()


class Reporter:
    """Rank 0's metrics: printed as metric lines, and logged to MLflow too when ``mlflow`` is given."""

    def __init__(self, mlflow: MlflowLogger | None = None) -> None:
        self.mlflow = mlflow

    def __call__(self, step: int, epoch: int, **values: float) -> None:
        emit(step, epoch, **values)
        if self.mlflow is not None:  # the epoch is a metric too, so it keeps its name (MLflow's step is the step)
            self.mlflow.log(step, {"epoch": epoch, **values})

    def close(self, timeout: float) -> None:
        if self.mlflow is not None:
            self.mlflow.close(timeout)
