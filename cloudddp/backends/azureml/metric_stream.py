"""A job's metrics as they come, from whichever record the job keeps: its MLflow run when that can be read and
has points, else the metric lines of its logs, each poll reading only what is new in both.

Each poll reads the logs' new lines first, then asks MLflow: a script that logs to MLflow has logged a point
before Azure ML uploads the line that prints it, so MLflow wins a tie and the same measurement is never shown
twice. The first source that gives a record is kept for the rest of the run (a script that only prints metric
lines, as the ``init`` template does, shows them live; one that logs to MLflow shows what Studio charts). When
MLflow cannot be read (no ``azureml-mlflow`` for the workspace's ``azureml://`` URI, no tracking URI, a refused
read before any point), the log lines are read, and :data:`FALLBACK` says why once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from cloudddp.backends.azureml.logs import LogFiles
from cloudddp.backends.azureml.mlflow_metrics import MlflowMetrics
from cloudddp.errors import CloudDDPError
from cloudddp.observe.metrics import MetricRecord, Pattern, record_of_log_line

FALLBACK = "metrics from the job's log lines (its MLflow run cannot be read here: {why})"


@dataclass
class MetricStream:
    """One job's metric records, poll after poll."""

    run_id: str
    mlflow: Callable[[], MlflowMetrics]
    """Makes the MLflow reader; it may raise (a CloudDDPError saying why), and the logs are read instead."""
    logs: Callable[[], LogFiles]
    finished: Callable[[], bool]
    """Whether the job has ended (asked before each poll: a poll after the end is the last)."""
    patterns: Sequence[Pattern]
    poll_seconds: float
    say: Callable[[str], None]
    """Where the fallback's one line goes."""

    def records(self, *, follow: bool) -> Iterator[MetricRecord]:
        reader, source = self._reader(), ""
        files = self.logs()
        try:
            while True:
                last = self.finished() if follow else True
                from_logs = [] if source == "mlflow" else self._from_logs(files, last)
                from_mlflow: list[MetricRecord] = []
                if reader is not None and source != "logs":
                    try:
                        from_mlflow = reader.new_records(self.run_id)
                    except CloudDDPError as e:
                        if source == "mlflow":  # it gave points, then failed: the logs would repeat them
                            raise
                        self.say(_fallback(e))
                        reader = None
                if from_mlflow:
                    source = "mlflow"
                    yield from from_mlflow
                if source != "mlflow" and from_logs:
                    source = "logs"
                    yield from from_logs
                if last:
                    return
                time.sleep(self.poll_seconds)
        finally:
            files.close()

    def _reader(self) -> MlflowMetrics | None:
        try:
            return self.mlflow()
        except CloudDDPError as e:
            self.say(_fallback(e))
            return None

    def _from_logs(self, files: LogFiles, final: bool) -> list[MetricRecord]:
        found = (record_of_log_line(line, self.patterns) for line in files.read(final=final))
        return [r for r in found if r is not None]


def _fallback(error: CloudDDPError) -> str:
    """:data:`FALLBACK` for ``error``, with what to do when it says (``pip install 'cloudddp[azure-mlflow]'``)."""
    hint = getattr(error, "hint", None)
    return FALLBACK.format(why=str(error).splitlines()[0] + (f"; {hint}" if hint else ""))
