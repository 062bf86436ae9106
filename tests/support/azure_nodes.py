"""A job of the offline workspace (azure_rig.py) run on this machine as Azure ML's nodes would run it.

The job is what the service received (``WorkspaceModel.submitted_job``: its command, variables, outputs and
the code snapshot from the blob store), started under Azure ML's PyTorch distribution with real processes
(azure_launchers.py), with ``MLFLOW_TRACKING_URI``/``MLFLOW_RUN_ID`` set as Azure ML sets them when the
workspace has an MLflow server. Its outputs are mounted as blobfuse mounts them: filled from the workspace's
blobs on Azurite before the processes start, uploaded back while they run and when the attempt ends
(azure_mounts.py). While they run, each process's output is appended to the job's
``user_logs/std_log_process_<rank>.txt`` in the artifact store, as Azure ML uploads it, so the backend reads
it where it reads a real job's. The job then ends as Azure would end it: completed, failed by its own
code, or preempted (its processes told with SIGTERM, as a low-priority node's eviction notice tells them, then
killed, and the run history's error saying so), through Finalizing (Running -> Finalizing -> Completed or
Failed, as the REST spec's job states go).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from tests.support.azure_launchers import AzureRun, Datastores, Started, start_pytorch
from tests.support.azure_mounts import BlobMounts
from tests.support.azure_rig import PREEMPTED, SCRIPT_FAILED, WorkspaceModel
from tests.support.waiting import wait_until

FINALIZING_SECONDS = 0.5
"""How long a finished job shows Finalizing (its outputs uploaded) before its final state."""
PUMP_SECONDS, UPLOAD_EVERY = 0.2, 1
"""How often the processes' new output is copied to their log files; every how many copies the outputs are
uploaded (files that have stopped changing since the look before). Every copy: a checkpoint the script replaces
within a second (the shared script keeps its newest two, and a digits epoch takes half a second) is still seen
settled and uploaded, as blobfuse uploads a file when it is closed."""


class AzureNodes:
    def __init__(self, model: WorkspaceModel, job_name: str, work: Path, stores: Datastores) -> None:
        self.model, self.name = model, job_name
        self.job: dict[str, Any] = model.submitted_job(job_name, work / "snapshot")
        mlflow = {"MLFLOW_TRACKING_URI": model.mlflow.url, "MLFLOW_RUN_ID": job_name} if model.mlflow else {}
        self.mounts = BlobMounts(model, stores.root)  # the outputs, as blobfuse mounts them (azure_mounts.py)
        self.started: Started = start_pytorch(self.job, work, self.mounts, mlflow)
        model.set_job_status(job_name, "Running")
        self.offsets: dict[int, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pump = threading.Thread(target=self._follow, name=f"logs-{job_name}", daemon=True)
        self._pump.start()

    @property
    def checkpoints(self) -> Path:
        """The folder the job's ``outputs.checkpoints`` is mounted at."""
        return self.started.outputs["checkpoints"]

    def _copy_new_output(self) -> None:
        with self._lock:
            for rank in self.started.procs:
                data = self.started.log_file(rank).read_bytes()
                done = self.offsets.get(rank, 0)
                if len(data) > done:
                    self.model.write_log(self.name, rank, data[done:].decode("utf-8", errors="replace"))
                    self.offsets[rank] = len(data)

    def _follow(self) -> None:
        beat = 0
        while not self._stop.wait(PUMP_SECONDS):
            self._copy_new_output()
            beat += 1
            if beat % UPLOAD_EVERY == 0:
                with self._lock:
                    self.mounts.sync(settled_only=True)

    def _end(self, grace: float = 0) -> AzureRun:
        self.started.stop(grace)
        self._stop.set()
        self._pump.join(timeout=10)
        self._copy_new_output()  # the last lines, written before the processes ended
        self.mounts.sync()  # what they wrote to their outputs, uploaded
        return self.started.result()

    def finish(self, timeout: float) -> AzureRun:
        """Wait for the processes; the job completes, or fails as a script that exits non-zero does."""
        self.started.wait(timeout)
        run = self._end()
        self.model.set_job_status(self.name, "Finalizing")  # outputs and logs uploaded, as Azure ML does
        time.sleep(FINALIZING_SECONDS)
        if run.ok:
            self.model.set_job_status(self.name, "Completed")
        else:
            self.model.fail_job(self.name, SCRIPT_FAILED)
        return run

    def preempt(self, notice: float = 30) -> AzureRun:
        """The low-priority nodes are taken back: every process told (SIGTERM), killed ``notice`` seconds later
        if still running, and the job failed with Azure's error."""
        run = self._end(notice)
        self.model.fail_job(self.name, PREEMPTED)
        return run

    def preempt_once_logged(self, marker: str, timeout: float = 120) -> AzureRun:
        """The nodes preempted once rank 0 has printed ``marker`` (training is under way); whatever still runs is
        killed if the wait fails."""
        try:
            wait_until(lambda: marker in self.started.log_file(0).read_text(errors="replace"), timeout, poll=0.1)
            return self.preempt()
        finally:
            self.stop()

    def stop(self) -> None:
        """Kill whatever still runs (a test that failed half-way)."""
        self._end()
