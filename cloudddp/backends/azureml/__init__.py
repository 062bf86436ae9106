"""The Azure ML backend: a command job with PyTorch (or MPI) distribution on serverless compute, or on an
AmlCompute cluster when ``azureml.compute`` names one.

``render`` writes the CLI v2 YAML without importing azure-ai-ml (~2 s to import): decide.py makes the job's
choices once, document.py builds the YAML documents from them and explain.py the plan's lines. For a cluster
job ``launch`` creates the cluster when it is missing, or raises only its ``max_instances`` when it is too small
(cluster.py); a serverless job needs neither. It then submits the rendered YAML through the SDK's own
``load_job``, so what runs is what was rendered. Logs are read from the job's artifact store a few new bytes at a
time (logs.py); metrics from the job's MLflow run, as Studio shows them (mlflow_metrics.py), or from the metric
lines in the logs (metric_stream.py).

Also: the ``azureml:`` section (``options.py``), what render checks (``environment.py``, ``inputs.py``,
``limits.py``), the workspace and its datastores (``workspace.py``, ``datastores.py``), the credential and transport
from the environment (``extensions.py``), preflight and quota (``preflight.py``, ``quota.py``), states and failures
(``states.py``, ``failures.py``), the bill (``bill.py``), the checkpoint folder in blobs (``checkpoint_store.py``).
"""

from __future__ import annotations

import datetime
import os
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from cloudddp.backends.azureml.bill import job_bill
from cloudddp.backends.azureml.checkpoint_store import blob_checkpoints
from cloudddp.backends.azureml.cluster import compute_url, grow, no_compute_write, scale_settings, tier_mismatch
from cloudddp.backends.azureml.decide import decide
from cloudddp.backends.azureml.document import documents, to_yaml
from cloudddp.backends.azureml.explain import explain
from cloudddp.backends.azureml.extensions import credential_from_environment, transport_from_environment
from cloudddp.backends.azureml.failures import failure_cause, failure_message, root_error
from cloudddp.backends.azureml.logs import LogFiles
from cloudddp.backends.azureml.metric_stream import MetricStream
from cloudddp.backends.azureml.mlflow_metrics import MlflowMetrics
from cloudddp.backends.azureml.options import AzureMLOptions
from cloudddp.backends.azureml.preflight import SIGN_IN_FIX, preflight_checks
from cloudddp.backends.azureml.states import SAID, STATES, native_state
from cloudddp.backends.azureml.workspace import ENV as WORKSPACE_ENV
from cloudddp.backends.azureml.workspace import AzureMLTarget, require_workspace, workspace_fields
from cloudddp.backends.base import Launched, Progress
from cloudddp.backends.checkpoints.store import CheckpointStore
from cloudddp.backends.checks import Check, MissingSetting
from cloudddp.backends.features import Capabilities, Feature
from cloudddp.backends.sized import SizedBackend
from cloudddp.backends.status import Cause, LogLine, RunState, RunStatus
from cloudddp.catalog.bill import Bill
from cloudddp.catalog.target import SizeTarget
from cloudddp.errors import BackendUnavailable, CloudDDPError, UserError
from cloudddp.observe.metrics import RANK_ZERO, MetricRecord, metrics_from_lines
from cloudddp.plan import Plan
from cloudddp.spec.model import JobSpec
from cloudddp.spec.secrets import redacted_spec_data

POLL_SECONDS = float(os.environ.get("CLOUDDDP_AZUREML_POLL", "5"))
_FAILED_CLUSTER_FIX = (
    "Azure keeps a cluster that failed, in state Failed: once the cause is fixed, delete it "
    "(az ml compute delete --name {name}) and submit again, or name another cluster in azureml.compute"
)


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
        self.credential = credential
        self._transport = transport
        self._transport_read = transport is not None
        self.token = token
        self.poll_seconds = poll_seconds
        self._clients: dict[tuple[str, str, str], Any] = {}
        self._failures: dict[str, tuple[Cause, str, dict[str, str]]] = {}
        self._unchecked: dict[str, list[Check]] = {}
        """job name -> its preflight checks that could not be made: said at launch, never passed in silence."""

    def _size_target(self, spec: JobSpec) -> SizeTarget:
        az = self.options(spec)  # a cluster stays up (billed) for its scale-down delay after the job; serverless not
        idle = float(az.idle_time_before_scale_down) if az.compute else 0.0
        return SizeTarget("azure", az.vm_size, "azureml.vm_size", idle_s=idle)

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

    # -- the SDK (imported here only) ------------------------------------------------------------
    def _client(self, workspace: dict[str, str]) -> Any:
        ws = require_workspace(workspace)
        key = (ws.subscription_id, ws.resource_group, ws.name)
        if key not in self._clients:
            try:
                from azure.ai.ml import MLClient
            except ImportError:
                raise BackendUnavailable(
                    "the Azure ML backend needs azure-ai-ml", hint="pip install 'cloudddp[azure]'"
                ) from None
            kwargs = {"transport": self.transport} if self.transport is not None else {}
            # show_progress=False: azure-ai-ml's own upload bars are not cloudddp's (its progress says "uploading")
            self._clients[key] = MLClient(
                self._credential(), ws.subscription_id, ws.resource_group, ws.name, show_progress=False, **kwargs
            )
        return self._clients[key]

    @property
    def transport(self) -> Any:
        """The transport given, else the one ``CLOUDDDP_AZURE_TRANSPORT`` names (made once), else None:
        azure-core's default."""
        if not self._transport_read:
            self._transport, self._transport_read = transport_from_environment(), True
        return self._transport

    def _credential(self) -> Any:
        """The credential given, else the one ``CLOUDDDP_AZURE_CREDENTIAL`` names, else
        ``DefaultAzureCredential`` (made once: it caches its tokens)."""
        if self.credential is None:
            self.credential = credential_from_environment()
        if self.credential is None:
            import logging

            from azure.identity import DefaultAzureCredential

            # azure.identity logs every failed sign-in attempt at length; the error cloudddp prints says what to do.
            logging.getLogger("azure.identity").setLevel(logging.ERROR)
            self.credential = DefaultAzureCredential()
        return self.credential

    def _workspace_of(self, run_id: str) -> dict[str, str]:
        record = self.records.get(run_id)
        if record and record.info.get("workspace"):
            return dict(record.info["workspace"])
        return workspace_fields(None)

    def _translate(self, error: Exception) -> CloudDDPError | None:
        """azure-core's errors, in one place: sign-in and permission failures exit 2 with the fix."""
        from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ServiceRequestError

        if isinstance(error, ClientAuthenticationError):
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            return BackendUnavailable(f"Azure sign-in failed: {first}", hint=SIGN_IN_FIX)
        if isinstance(error, HttpResponseError):
            if error.status_code in (401, 403):
                return BackendUnavailable(
                    f"Azure refused these credentials ({error.status_code}): {error.message}",
                    hint=SIGN_IN_FIX + "; the identity needs a role on the workspace",
                )
            return CloudDDPError(f"Azure ML refused the request: {error.message}")
        if isinstance(error, ServiceRequestError):
            return CloudDDPError(f"cannot reach Azure: {error}")
        return None

    # -- launch ------------------------------------------------------------------------------
    def _launch(self, plan: AzureMLPlan, *, provision: bool, progress: Progress | None) -> Launched:
        from azure.core.exceptions import ResourceNotFoundError

        workspace = plan.target.workspace
        info = {"workspace": require_workspace(workspace).to_dict()}
        client = self._client(workspace)
        name = plan.request["job"]["name"]
        try:
            client.jobs.get(name)
            if progress:
                progress.step(f"job {name} already exists: not submitting it again")
            return Launched(name, info)
        except ResourceNotFoundError:
            pass
        for check in self._unchecked.pop(name, []):
            self._warn(f"not checked: {check.name}: {check.detail}", progress)
        if plan.request["compute"] is None:
            if progress:
                progress.step("serverless compute: Azure ML provisions the nodes for this job; no cluster to create")
        else:
            cluster = self._existing_cluster(client, plan.request["compute"]["name"])
            if cluster is not None:
                self._warn_on_tier(plan, cluster, progress)
            if provision:
                self._provision(client, plan, cluster, progress)
        job = self._load_job(plan)
        if progress:
            progress.step(f"uploading code snapshot of {job.code} (skipped when unchanged)")
        client.jobs.create_or_update(job)
        if progress:
            progress.step(f"submitted {name}")
        return Launched(name, info)

    def _load_job(self, plan: AzureMLPlan) -> Any:
        """The rendered YAML through the SDK's own loader; secrets are set on the entity, never on disk."""
        from azure.ai.ml import load_job

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "job.yml"
            path.write_text(plan.documents["job.yml"])
            job: Any = load_job(source=path)
        job.environment_variables = plan.reveal(dict(job.environment_variables))
        return job

    @staticmethod
    def _existing_cluster(client: Any, name: str) -> Any:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            return client.compute.get(name)
        except ResourceNotFoundError:
            return None

    @staticmethod
    def _warn_on_tier(plan: AzureMLPlan, cluster: Any, progress: Progress | None) -> None:
        """A dedicated cluster for a spot job (or the reverse) runs it, but not as the spec asked: say so."""

        wanted = plan.request["compute"]
        warning = tier_mismatch(wanted["name"], cluster, spot=wanted["tier"] == "low_priority")
        if warning:
            AzureMLBackend._warn(warning, progress)

    @staticmethod
    def _warn(warning: str, progress: Progress | None) -> None:
        """A warning at launch: on the progress when there is one, else as a Python warning."""
        if progress:
            progress.step(f"warning: {warning}")
        else:
            warnings.warn(warning, stacklevel=5)

    def _provision(self, client: Any, plan: AzureMLPlan, current: Any, progress: Progress | None) -> None:
        """Create the cluster when it is missing; when it is smaller than the job, raise its max_instances
        and nothing else (its subnet, identity, SSH and scale-down settings stay the owner's)."""
        from azure.core.exceptions import HttpResponseError

        wanted = plan.request["compute"]
        if current is None:
            self._create_cluster(client, plan, progress)
            return
        state = getattr(current, "provisioning_state", None)
        if str(getattr(state, "value", state) or "").lower() == "failed":  # the SDK gives an enum
            reason = getattr(current, "provisioning_errors", None)
            raise CloudDDPError(
                f"cluster {wanted['name']} is in state Failed"
                + (f" ({reason})" if reason else "")
                + ": a job sent to it would never start. "
                + _FAILED_CLUSTER_FIX.format(name=wanted["name"])
            )
        if str(getattr(current, "size", "")).lower() != wanted["size"].lower():
            raise UserError(
                f"cluster {wanted['name']} exists with size {current.size}, the job needs {wanted['size']}",
                hint="name another cluster in azureml.compute, or set azureml.vm_size to its size",
            )
        have = current.max_instances or 0
        if have >= plan.request["job"]["resources"]["instance_count"]:
            if progress:
                progress.step(f"cluster {wanted['name']} is ready ({wanted['size']}, up to {have} nodes)")
            return

        if progress:
            progress.step(
                f"growing cluster {wanted['name']}: max_instances {have} -> {wanted['max_instances']} "
                "(nothing else changes)"
            )
        ws = require_workspace(plan.target.workspace)
        url = compute_url(ws.subscription_id, ws.resource_group, ws.name, wanted["name"])
        try:
            grow(
                self._credential(),
                self.transport,
                url,
                scale_settings(current, wanted["max_instances"]),
                poll_seconds=self.poll_seconds,
                progress=progress.step if progress else None,
            )
        except HttpResponseError as e:
            if e.status_code == 403:
                raise no_compute_write(wanted["name"], e, doing="growing") from None
            raise

    def _create_cluster(self, client: Any, plan: AzureMLPlan, progress: Progress | None) -> None:
        from azure.ai.ml import load_compute
        from azure.core.exceptions import HttpResponseError

        wanted = plan.request["compute"]
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "compute.yml"
            path.write_text(plan.documents["compute.yml"])
            compute = load_compute(source=path)
        if progress:
            progress.step(
                f"creating cluster {wanted['name']} ({wanted['size']}, {wanted['tier']}, "
                f"{wanted['min_instances']}–{wanted['max_instances']} nodes)"
            )
        try:
            poller = client.compute.begin_create_or_update(compute)
        except HttpResponseError as e:
            if e.status_code == 403:
                raise no_compute_write(wanted["name"], e) from None
            raise
        started = time.monotonic()
        try:
            while not poller.done():
                if progress:
                    progress.step(
                        f"provisioning {wanted['name']}: {poller.status()} ({time.monotonic() - started:.0f} s)"
                    )
                poller.wait(self.poll_seconds)
            poller.result()
        except HttpResponseError as e:  # the creation's operation ended Failed (wait re-raises what polling met)
            reason = (e.message or str(e)).strip().splitlines()[0].rstrip(".")
            raise CloudDDPError(
                f"creating cluster {wanted['name']} ended Failed: {reason}. The job was not submitted. "
                + _FAILED_CLUSTER_FIX.format(name=wanted["name"])
            ) from None

    # -- run verbs ---------------------------------------------------------------------------
    def _describe(self, run_id: str) -> RunStatus | None:
        from azure.core.exceptions import ResourceNotFoundError

        workspace = self._workspace_of(run_id)
        try:
            job = self._client(workspace).jobs.get(run_id)
        except ResourceNotFoundError:
            return None
        native = native_state(job)
        state = STATES.get(native, RunState.UNKNOWN)
        ctx = getattr(job, "creation_context", None)
        created = getattr(ctx, "created_at", None)
        details = {
            "studio_url": job.studio_url,
            "compute": job.compute,
            "instance_count": getattr(job.resources, "instance_count", None),
        }
        cause, message = (Cause.CANCELLED if state is RunState.CANCELLED else None), SAID.get(native, native)
        if state is RunState.FAILED:
            cause, message, failure = self._failure(run_id, workspace)
            details["failure"] = failure
        return RunStatus(
            run_id=run_id,
            backend=self.name,
            state=state,
            name=str(job.display_name or run_id),
            native_state=native,
            message=message,
            created_at=created.timestamp() if isinstance(created, datetime.datetime) else None,
            details=details,
            cause=cause,
        )

    def _failure(self, run_id: str, workspace: dict[str, str]) -> tuple[Cause, str, dict[str, str]]:
        """Why a failed job failed, from the error in its run history (where ``az ml job show`` and Studio read it;
        kept once read: it does not change); an unknown cause, saying why, when the run history cannot be read
        or has no error yet."""
        from azure.core.exceptions import AzureError

        if run_id in self._failures:
            return self._failures[run_id]
        try:  # the run history, as bill.py reads it
            details = self._client(workspace).jobs._runs_operations.get_run_details(run_id).as_dict()
        except AzureError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            return Cause.UNKNOWN, f"Failed (why could not be read from the run history: {first})", {}
        error = root_error(details)
        if error is None:  # not kept: the error may be recorded a moment after the status
            return Cause.UNKNOWN, "Failed (the run history gives no error yet; the job's logs may say why)", {}
        failure = {"code": str(error.get("code", "")), "message": failure_message(error, limit=4000)}
        self._failures[run_id] = (failure_cause(error), failure_message(error), failure)
        return self._failures[run_id]

    def _log_iter(self, run_id: str, *, follow: bool) -> Iterator[LogLine]:
        """Each process's log file in the job's artifact store, reading only the bytes added since the last poll."""

        client = self._client(self._workspace_of(run_id))
        files = LogFiles.of_job(client, client.jobs.get(run_id), self._credential(), self.transport)
        try:
            while True:
                finished = self.status(run_id).state.terminal if follow else True
                yield from files.read(final=finished)
                if finished:
                    return
                time.sleep(self.poll_seconds)
        finally:
            files.close()

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
            finished=lambda: self.status(run_id).state.terminal,
            patterns=patterns,
            poll_seconds=self.poll_seconds,
            say=lambda line: self._warn(line, None),
        )
        yield from stream.records(follow=follow)

    def _checkpoint_store(self, location: str, target: AzureMLTarget) -> CheckpointStore:
        """The training's folder in the workspace's blob storage (checkpoint_store.py), where its nodes mount it."""
        return blob_checkpoints(self._client(target.workspace), location, self._credential(), self.transport)

    def _cancel(self, run_id: str) -> None:
        self._client(self._workspace_of(run_id)).jobs.begin_cancel(run_id).result()

    def _bill(self, run_id: str) -> Bill | None:
        """bill.py: the run history's start to end on the job's nodes, then the cluster's idle time."""
        return job_bill(self._client(self._workspace_of(run_id)), run_id)

    def _preflight(self, plan: AzureMLPlan) -> list[Check]:
        """Workspace and credentials reachable; the size offered in the region; quota enough, counted as Azure
        counts it (preflight.py). What could not be checked is said again at launch."""
        workspace = plan.target.workspace
        ws = require_workspace(workspace)
        checks = preflight_checks(lambda: self._client(workspace), ws, plan.request)
        self._unchecked[plan.request["job"]["name"]] = [c for c in checks if c.ok is None]
        return checks


__all__ = ["AzureMLBackend", "AzureMLOptions"]
