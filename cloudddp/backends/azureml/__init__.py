"""The Azure ML backend: a command job with PyTorch (or MPI) distribution on serverless compute, or on an
AmlCompute cluster when ``azureml.compute`` names one.

``render`` writes the CLI v2 YAML without importing azure-ai-ml (~2 s to import): decide.py makes the job's
choices once, document.py builds the YAML documents from them and explain.py the plan's lines. For a cluster
job ``launch`` (launch.py) creates the cluster when it is missing, or raises only its ``max_instances`` when it is
too small (provision.py, cluster.py); a serverless job needs neither. It then submits the rendered YAML through the
SDK's own ``load_job``, so what runs is what was rendered. Logs are read from the job's artifact store a few new
bytes at a time (logs.py); metrics from the job's MLflow run, as Studio shows them (mlflow_metrics.py), or from the
metric lines in the logs (metric_stream.py).

Also: the ``azureml:`` section (``options.py``), what render checks (``environment.py``, ``inputs.py``,
``limits.py``), the workspace and its datastores (``workspace.py``, ``datastores.py``), the SDK's clients and its
errors translated (``client.py``), the credential and transport from the environment (``extensions.py``), the run's
record (``record.py``), preflight and quota (``preflight.py``, ``quota.py``), status, states and failures, a hang
named from the logs (``status.py``, ``states.py``, ``failures.py``), the bill (``bill.py``), the checkpoint folder
in blobs (``checkpoint_store.py``).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterator
from typing import Any, ClassVar

from cloudddp.backends.azureml.bill import job_bill
from cloudddp.backends.azureml.checkpoint_store import blob_checkpoints
from cloudddp.backends.azureml.client import AzureClients, translate
from cloudddp.backends.azureml.decide import decide
from cloudddp.backends.azureml.document import documents, to_yaml
from cloudddp.backends.azureml.explain import explain, queue_line
from cloudddp.backends.azureml.launch import submit, warn
from cloudddp.backends.azureml.logs import LogFiles, followed
from cloudddp.backends.azureml.metric_stream import MetricStream
from cloudddp.backends.azureml.mlflow_metrics import MlflowMetrics
from cloudddp.backends.azureml.options import AzureMLOptions
from cloudddp.backends.azureml.preflight import preflight_checks
from cloudddp.backends.azureml.record import AzureMLRunInfo
from cloudddp.backends.azureml.status import Failures, find_job, job_status
from cloudddp.backends.azureml.workspace import ENV as WORKSPACE_ENV
from cloudddp.backends.azureml.workspace import AzureMLTarget, require_workspace, workspace_fields
from cloudddp.backends.base import Launched, Progress
from cloudddp.backends.checkpoints.store import CheckpointStore
from cloudddp.backends.checks import Check, MissingSetting
from cloudddp.backends.features import Capabilities, Feature
from cloudddp.backends.sized import SizedBackend
from cloudddp.backends.status import Cause, LogLine, RunState, RunStatus
from cloudddp.backends.verdicts import KeptVerdicts, concluding
from cloudddp.catalog.bill import Bill
from cloudddp.catalog.target import SizeTarget
from cloudddp.errors import CloudDDPError
from cloudddp.injob.culprit import Capture
from cloudddp.injob.stack_answers import requested
from cloudddp.injob.stack_requests import REQUEST_TAG
from cloudddp.observe.metrics import RANK_ZERO, MetricRecord, metrics_from_lines
from cloudddp.plan import Plan
from cloudddp.spec.model import JobSpec
from cloudddp.spec.secrets import redacted_spec_data

POLL_SECONDS = float(os.environ.get("CLOUDDDP_AZUREML_POLL", "5"))
STACKS_WAIT_S = float(os.environ.get("CLOUDDDP_STACKS_WAIT_S", "60"))
"""How long ``cloudddp stacks`` waits for the nodes' answers in the log: their poll (10 s), Azure ML's upload of the
log files, this backend's own poll of them."""


AzureMLPlan = Plan[dict[str, Any], AzureMLTarget]


class AzureMLBackend(SizedBackend[AzureMLOptions]):
    name: ClassVar[str] = "azureml"
    description: ClassVar[str] = (
        "Azure ML command job with PyTorch/MPI distribution on serverless compute or an AmlCompute cluster"
    )
    options_model = AzureMLOptions
    target_type = AzureMLTarget
    cloud: ClassVar[str | None] = "azure"
    # What CLOUDDDP_SIGTERM_GRACE says on Azure ML. Azure documents no signal to the job's processes on a
    # low-priority eviction or a cancel (a preempted job fails with PreemptionError and is resubmitted from its
    # checkpoints); 30 s is the VM's Scheduled Events notice, which a script may get, not a promise.
    sigterm_grace: ClassVar[int] = 30
    spend_while_running: ClassVar[bool] = True  # the run history's start time × nodes × price, while the job runs
    capabilities: ClassVar[Capabilities] = Capabilities(
        unsupported={
            Feature.SMDDP: "the SageMaker data-parallel library runs only on SageMaker; "
            "use -o distribution.backend=nccl",
        },
        caveats={
            Feature.MAX_RESTARTS: "Azure ML command jobs do not restart failed processes (limits.max_restarts); "
            "resubmit the job and it resumes from its checkpoints",
            Feature.SECRET_ENV: "command jobs have no secret-safe environment field: secrets are set at submit and "
            "are visible in the job definition; prefer Key Vault and a managed identity",
        },
    )

    def __init__(
        self,
        credential: Any = None,
        *,
        transport: Any = None,
        token: str | None = None,
        poll_seconds: float = POLL_SECONDS,
        **base: Any,
    ) -> None:
        super().__init__(**base)
        self._clients = AzureClients(credential, transport)
        self.token = token
        self.poll_seconds = poll_seconds
        self._failures = Failures()
        self._concluded = KeptVerdicts()
        self._unchecked: dict[str, list[Check]] = {}
        """job name -> its preflight checks that could not be made: said at launch, never passed in silence."""

    def _size_target(self, spec: JobSpec) -> SizeTarget:
        az = self.options(spec)  # a cluster stays up (billed) for its scale-down delay after the job; serverless not
        idle = float(az.idle_time_before_scale_down) if az.compute else 0.0
        return SizeTarget("azure", az.vm_size, "azureml.vm_size", idle_s=idle)

    def _recovery_notes(self, spec: JobSpec) -> tuple[list[str], list[str]]:
        decisions, warnings = super()._recovery_notes(spec)
        return decisions + queue_line(spec, moves=bool(decisions)), warnings

    cpu_size_example = ("Standard_D8s_v5", "Standard_D8s_v5 has 8 vCPUs, Standard_F16s_v2 16")

    def _missing_settings(self, spec: JobSpec) -> list[MissingSetting]:
        found = workspace_fields(self.options(spec))
        workspace = {  # what submit needs; render does not
            "subscription_id": ("the Azure subscription (a config.json from the portal names it too)", "<guid>"),
            "resource_group": ("the workspace's resource group", "my-resource-group"),
            "name": ("the Azure ML workspace", "my-workspace"),
        }
        missing = []
        for key, (what, example) in workspace.items():
            if not found.get(key):
                field = "azureml.workspace" if key == "name" else f"azureml.{key}"
                missing.append(MissingSetting(field, what, example, WORKSPACE_ENV[key], needed_to_render=False))
        return super()._missing_settings(spec) + missing

    # -- render ------------------------------------------------------------------------------
    def _render(self, spec: JobSpec) -> AzureMLPlan:
        az, token = self.options(spec), self.token or time.strftime("%y%m%d%H%M%S")
        decision = decide(spec, az, self._size_target(spec), sigterm_grace=self.sigterm_grace)
        job, compute = documents(decision, token)
        lines, cautions = explain(decision)
        return Plan(
            backend=self.name,
            job_name=job["name"],
            request={"job": job, "compute": compute},
            documents={"job.yml": to_yaml(job), **({"compute.yml": to_yaml(compute)} if compute else {})},
            decisions=lines,
            warnings=cautions,
            estimate=decision.sizing.estimate,
            target=AzureMLTarget(workspace_fields(az), decision.checkpoints or None),
            job=redacted_spec_data(spec),
            env_sources=decision.env_sources,
        )

    def _for_attempt(self, plan: Plan, attempt: int) -> Plan:
        """Job names are unique in a workspace: the attempt gets ``-rN`` and a ``cloudddp:attempt`` tag, and its
        ``job.yml`` is dumped again, so what is submitted is still the plan's document. The code, data and
        checkpoint folder (named after the training, not the job) stay the same."""
        base = plan.job_name.removesuffix(f"-r{attempt - 1}") if attempt > 2 else plan.job_name
        again = plan.renamed(f"{base}-r{attempt}")
        job = again.request["job"]
        job["tags"] = {**job.get("tags", {}), "cloudddp:attempt": str(attempt)}
        again.documents["job.yml"] = to_yaml(job)
        return again

    # -- the SDK (client.py: imported there, never at render) ------------------------------------
    def _client(self, workspace: dict[str, str]) -> Any:
        return self._clients.client(workspace)

    def _credential(self) -> Any:
        return self._clients.credential()

    @property
    def transport(self) -> Any:
        """The transport given, else the one ``CLOUDDDP_AZURE_TRANSPORT`` names, else None: azure-core's default."""
        return self._clients.transport

    def _record(self, run_id: str) -> AzureMLRunInfo | None:
        record = self.records.get(run_id)
        if record is None or record.backend != self.name:
            return None
        return AzureMLRunInfo.from_fields(record.info)

    def _workspace_of(self, run_id: str) -> dict[str, str]:
        info = self._record(run_id)
        return info.workspace.to_dict() if info is not None and info.workspace else workspace_fields(None)

    def _translate(self, error: Exception) -> CloudDDPError | None:
        return translate(error)

    # -- launch ------------------------------------------------------------------------------
    def _launch(self, plan: AzureMLPlan, *, provision: bool, progress: Progress | None) -> Launched:
        unchecked = self._unchecked.pop(plan.request["job"]["name"], [])
        return submit(
            plan,
            self._clients,
            provision=provision,
            unchecked=unchecked,
            poll_seconds=self.poll_seconds,
            progress=progress,
        )

    def _preflight(self, plan: AzureMLPlan) -> list[Check]:
        """Workspace and credentials reachable; the size offered in the region; quota enough, counted as Azure
        counts it (preflight.py). What could not be checked is said again at launch."""
        workspace = plan.target.workspace
        ws = require_workspace(workspace)
        checks = preflight_checks(lambda: self._client(workspace), ws, plan.request)
        self._unchecked[plan.request["job"]["name"]] = [c for c in checks if c.ok is None]
        return checks

    # -- run verbs ---------------------------------------------------------------------------
    def _describe(self, run_id: str) -> RunStatus | None:
        """The job's status; a job whose script failed because a collective timed out is a hang, with the verdict
        the hang doctor printed in its log (read once, status.py)."""
        client = self._client(self._workspace_of(run_id))
        job = find_job(client, run_id)
        if job is None:
            return None
        status = job_status(self.name, run_id, job, functools.partial(self._failures.of, client, run_id))
        if status.state is RunState.FAILED and status.cause is Cause.USER_ERROR:
            from azure.core.exceptions import AzureError

            lines = functools.partial(self._lines_now, client, job)
            found = self._concluded.of(self.records, run_id, lines, (AzureError, CloudDDPError))
            return concluding(status, found, **status.details.get("failure", {})) if found else status
        return status

    def _log_iter(self, run_id: str, *, follow: bool) -> Iterator[LogLine]:
        """Each process's log file in the job's artifact store, reading only the bytes added since the last poll."""
        client = self._client(self._workspace_of(run_id))
        finished = functools.partial(self._finished, run_id)
        yield from followed(
            self._files(client, client.jobs.get(run_id)), follow=follow, finished=finished, poll=self.poll_seconds
        )

    def _files(self, client: Any, job: Any) -> LogFiles:
        """The job's log files (logs.py), none read yet."""
        return LogFiles.of_job(client, job, self._credential(), self.transport)

    def _lines_now(self, client: Any, job: Any) -> Iterator[LogLine]:
        """The lines of the job's log files as they are now (their datastore reached at the first line)."""
        yield from followed(self._files(client, job), follow=False, finished=lambda: True, poll=0)

    def _finished(self, run_id: str) -> bool:
        return self.status(run_id).state.terminal

    def _metric_iter(self, run_id: str, *, follow: bool) -> Iterator[MetricRecord]:
        """The job's MLflow metrics (Azure ML's own record, what Studio charts), else the metric lines of its logs,
        live and new points only on each poll (metric_stream.py). A job that reads every rank's metrics
        (``metrics.ranks: all``) reads its log lines: MLflow's run has no rank to tell them apart."""

        patterns, ranks = self.metric_patterns(run_id), self.metric_ranks(run_id)
        if ranks != RANK_ZERO:
            yield from metrics_from_lines(self._log_iter(run_id, follow=follow), patterns, ranks)
            return
        workspace = self._workspace_of(run_id)
        client = self._client(workspace)
        stream = MetricStream(
            run_id,
            mlflow=lambda: MlflowMetrics.of_workspace(client, require_workspace(workspace).name),
            logs=lambda: LogFiles.of_job(client, client.jobs.get(run_id), self._credential(), self.transport),
            finished=functools.partial(self._finished, run_id),
            patterns=patterns,
            poll_seconds=self.poll_seconds,
            say=lambda line: warn(line, None),
        )
        yield from stream.records(follow=follow)

    def _checkpoint_store(self, location: str, target: AzureMLTarget) -> CheckpointStore:
        """The training's folder in the workspace's blob storage (checkpoint_store.py), where its nodes mount it."""
        return blob_checkpoints(self._client(target.workspace), location, self._credential(), self.transport)

    def _cancel(self, run_id: str) -> None:
        self._client(self._workspace_of(run_id)).jobs.begin_cancel(run_id).result()

    def _stacks(self, run_id: str) -> Capture:
        """A request in the job's MLflow run's tag, which one process per node reads every 10 s (in-job
        stack_requests.py); the answers and the ranks' dumps come back in the job's log files."""
        workspace = self._workspace_of(run_id)
        client = self._client(workspace)
        mlflow = MlflowMetrics.of_workspace(client, require_workspace(workspace).name).client
        return requested(
            lambda request: mlflow.set_tag(run_id, REQUEST_TAG, request),
            lambda follow: self.logs(run_id, follow=follow),
            answer_wait=STACKS_WAIT_S,
        )

    def _bill(self, run_id: str) -> Bill | None:
        """bill.py: the run history's start to end on the job's nodes, then the cluster's idle time."""
        return job_bill(self._client(self._workspace_of(run_id)), run_id)


__all__ = ["AzureMLBackend", "AzureMLOptions"]
