"""An offline Azure ML workspace for the real azure-ai-ml SDK, with blobs on a real Azurite server.

``WorkspaceAdapter`` is a requests adapter mounted on the session behind
``azure.core.pipeline.transport.RequestsTransport``: it answers the Azure ML REST routes the SDK calls
(workspace, code versions with the content-hash lookup and startPendingUpload, jobs, cancel, computes
with async provisioning and the ``Compute - Update`` PATCH, datastores with their secrets, VM sizes,
usages, the discovery document and run history) from an in-memory model. Where the REST spec has an example
(tests/fixtures/azure_rest/: ``Usage/list.json``, ``Compute/patch.json``), the rig answers in its shape.
Blob traffic (code snapshots, log files, the outputs a job's mounts upload: azure_mounts.py) goes to Azurite over
real HTTP: SAS URLs point at it directly, and the datastores' account URL
(``http://devstoreaccount1.blob.rig.invalid``) is forwarded to it by ``BlobForwarder``. Each ``WorkspaceModel``
has containers of its own (a random suffix), so what a test finds on the session's Azurite is what that test
wrote.

As on Azure ML, a job's logs are written under its ``default`` output
(``azureml://datastores/workspaceartifactstore/ExperimentRun/dcid.<job>``, container ``azureml`` on Azure), and
when the model has an MLflow server (a real ``mlflow server``) the workspace reports it as its
``mlFlowTrackingUri`` and every submitted job gets an MLflow run whose id is the job's name. A job failed
with ``fail_job`` has its error in its run history's details, where Azure ML reports why a job failed. As Azure ML
does, a serverless job whose VM family has too little quota for its nodes is refused at submission (a 400 with
AzureML Compute's ``JobNodeCountExceedsCoreQuota``: ``serverless_refusal``), and every accepted job waits ``Queued``
until a test moves it on (quota in use by other jobs, a cluster that cannot scale).

For other processes (the CLI, a recovery watcher), ``serve`` answers the same routes over HTTP on
127.0.0.1 and ``served_transport`` (named by ``CLOUDDDP_AZURE_TRANSPORT``, with the rig's credential by
``CLOUDDDP_AZURE_CREDENTIAL``: ``served_environment``) sends the SDK's requests there.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import io
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlparse

import requests
import requests.structures
import urllib3
from requests.adapters import BaseAdapter

from tests.support import watchdog
from tests.support.azure_launchers import log_name
from tests.support.cli import ROOT
from tests.support.ports import free_port

if TYPE_CHECKING:
    from tests.support.mlflow_server import MlflowServer

ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
SUB, RG, WS = "00000000-0000-0000-0000-000000000000", "ml-rg", "ml-workspace"
WS_PATH = f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.MachineLearningServices/workspaces/{WS}"
DISCOVERY = "https://discovery.rig.invalid/discovery/workspaces/abc"
RUN_HISTORY = "https://runhistory.rig.invalid"
STORAGE_ENDPOINT = "rig.invalid"  # a datastore's account URL is http://<account>.blob.<endpoint>
ACCOUNT_URL = f"http://{ACCOUNT}.blob.{STORAGE_ENDPOINT}"
Answer = tuple[int, Any, dict[str, str]]  # status, JSON body, headers
ML_HOSTS = ("https://management.azure.com", DISCOVERY.rsplit("/discovery", 1)[0], RUN_HISTORY)
OUTPUT_MODES = {"ReadWriteMount": "rw_mount", "Upload": "upload", "Direct": "direct"}  # REST -> CLI v2
HOST_HEADER = "X-Rig-Host"  # the host a forwarded request was for
RIG_URL, RIG_BLOB = "CLOUDDDP_TEST_AZURE_RIG", "CLOUDDDP_TEST_AZURE_BLOB"
PREEMPTED = (
    "AzureMLCompute job failed.\nPreemptionError: Nodes of this job got pre-empted. Check if the run has "
    "failed or restarted.\n\tReason: Received pre-emption warning signal"
)
"""What Azure ML reports for a preempted low-priority job (its code: UserError)."""
SCRIPT_FAILED = (
    "AzureMLCompute job failed\nExecutionFailed: [REDACTED]\n\texit_codes: 1\n\tAppinsights Reachable: Some(true)"
)
"""What Azure ML reports when the command exits non-zero (its code: UserError)."""
QUOTA_REFUSED = "JobNodeCountExceedsCoreQuota"
"""The code of AzureML Compute's refusal of a job whose nodes need more vCPUs than the family's quota (users report it
as "Job submission to AzureML Compute encountered an Exception with status code JobNodeCountExceedsCoreQuota, The
specified subscription has a Standard DSv2 family vCPU quota of 2 and is less than the requested job node count of 2
which maps to 4 vCPUs. ...")."""


def azurite_binary() -> str | None:
    local = ROOT / "node_modules" / ".bin" / "azurite-blob"
    return shutil.which("azurite-blob") or (str(local) if local.exists() else None)


@contextmanager
def azurite(tmp: Path) -> Iterator[str]:
    binary = azurite_binary()
    assert binary, "Azurite is not installed: `make test` installs it with `npm install`"
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--silent",
            "--disableTelemetry",
            "--skipApiVersionCheck",
            "--location",
            str(tmp),
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    watchdog.guard(proc.pid)  # the watchdog ends it should this process die before the finally below
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        proc.wait(timeout=10)
        watchdog.release(proc.pid)
        raise RuntimeError("Azurite did not start")
    try:
        yield f"http://127.0.0.1:{port}/{ACCOUNT}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        watchdog.release(proc.pid)


class FakeCredential:
    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        return AccessToken("rig-token", int(time.time()) + 3600)


REST_EXAMPLES = ROOT / "tests" / "fixtures" / "azure_rest"
"""Responses from the REST spec's examples (with their source paths), in whose shape the rig answers."""


def rest_example(name: str) -> dict[str, Any]:
    """One stored REST example response: ``status``, ``headers``, ``body``."""
    data: dict[str, Any] = json.loads((REST_EXAMPLES / f"{name}.json").read_text())
    return data


def usage_row(family: str, pool: str, current: int, limit: int) -> dict[str, Any]:
    """A family's subscription-level usage row as ``Usage/list.json`` has them: ``family`` is the core of the
    name ("NDASv4_A100"), ``pool`` ``Dedicated`` or ``LowPriority``."""
    name = f"Standard {family} Family Cluster {pool} vCPUs"
    return {
        "id": f"/subscriptions/{SUB}/usages/{name.replace(' ', '_')}",
        "type": "Microsoft.MachineLearningServices/vmFamily/usages",
        "currentValue": current,
        "limit": limit,
        "name": {"value": name, "localizedValue": name},
        "unit": "Count",
    }


def rig_usages() -> list[dict[str, Any]]:
    """The region's usages: the REST example's rows, with room in the regional totals for the rig's jobs, and
    the rows of the rig's families (NCADSA100v4 and NCASv3_T4 start at zero dedicated cores, as specialized
    families do)."""
    rows: list[dict[str, Any]] = copy.deepcopy(rest_example("usage_list")["body"]["value"])
    for row in rows:
        if row["name"]["value"].startswith("Total Cluster"):
            row["limit"] = 400
    rows += [
        usage_row("NDASv4_A100", "Dedicated", 0, 192),
        usage_row("NDASv4_A100", "LowPriority", 0, -1),
        usage_row("NCADSA100v4", "Dedicated", 0, 0),
        usage_row("NCADSA100v4", "LowPriority", 0, -1),
        usage_row("DSv3", "Dedicated", 0, 24),
        usage_row("NCadsH100v5", "Dedicated", 0, 80),
        usage_row("NCadsH100v5", "LowPriority", 0, -1),
        usage_row("NCASv3_T4", "Dedicated", 0, 0),
        usage_row("NCASv3_T4", "LowPriority", 0, -1),
    ]
    return rows


VM_SIZES: list[dict[str, Any]] = [
    {
        "name": "Standard_ND96asr_v4",
        "family": "standardNDASv4_A100Family",
        "vCPUs": 96,
        "gpus": 8,
        "memoryGB": 900,
        "lowPriorityCapable": True,
    },
    {
        "name": "Standard_NC96ads_A100_v4",
        "family": "standardNCADSA100v4Family",
        "vCPUs": 96,
        "gpus": 4,
        "memoryGB": 880,
        "lowPriorityCapable": True,
    },
    {
        "name": "Standard_NC24ads_A100_v4",
        "family": "standardNCADSA100v4Family",
        "vCPUs": 24,
        "gpus": 1,
        "memoryGB": 220,
        "lowPriorityCapable": True,
    },
    {  # the 1-GPU sizes a recovery moves to first (Microsoft Learn, NCasT4_v3 series)
        "name": "Standard_NC4as_T4_v3",
        "family": "standardNCASv3_T4Family",
        "vCPUs": 4,
        "gpus": 1,
        "memoryGB": 28,
        "lowPriorityCapable": True,
    },
    {
        "name": "Standard_NC40ads_H100_v5",
        "family": "standardNCadsH100v5Family",
        "vCPUs": 40,
        "gpus": 1,
        "memoryGB": 320,
        "lowPriorityCapable": True,
    },
    {
        "name": "Standard_D4s_v3",
        "family": "standardDSv3Family",
        "vCPUs": 4,
        "gpus": 0,
        "memoryGB": 16,
        "lowPriorityCapable": True,
    },
    {  # B-series takes no Spot nodes (Microsoft Learn, "Use Azure Spot Virtual Machines")
        "name": "Standard_B2s",
        "family": "standardBSFamily",
        "vCPUs": 2,
        "gpus": 0,
        "memoryGB": 4,
        "lowPriorityCapable": False,
    },
]
"""The region's VM sizes, as ``Virtual Machine Sizes - List`` answers them."""


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def _own_container(kind: str) -> str:
    """A container name no other test's workspace uses: Azurite lives for the whole session, so a fixed name
    would let an earlier test's blobs (code snapshots, job logs) satisfy a later test's assertion."""
    return f"{kind}-{uuid.uuid4().hex[:16]}"


@dataclass
class WorkspaceModel:
    blob_endpoint: str
    container: str = field(default_factory=lambda: _own_container("azureml-blobstore"))
    """The default datastore's container (workspaceblobstore: code snapshots, jobs' outputs and checkpoints), this
    workspace's own."""
    artifact_container: str = field(default_factory=lambda: _own_container("azureml"))
    """The container behind workspaceartifactstore (job logs; ``azureml`` on Azure), this workspace's own."""
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)  # "name/version" -> resource
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    computes: dict[str, dict[str, Any]] = field(default_factory=dict)
    log_files: dict[str, dict[str, str]] = field(default_factory=dict)  # job -> file -> SAS url
    calls: list[tuple[str, str]] = field(default_factory=list)
    sent: list[tuple[str, str, str]] = field(default_factory=list)
    """(method, host + path + query, JSON body) of every request to the workspace: what the SDK sent Azure ML."""
    unhandled: list[str] = field(default_factory=list)
    pending_uploads: int = 0
    faults: list[tuple[str, str, int]] = field(default_factory=list)
    """(method, path fragment, status) answered once, before the real route: throttling and 5xx."""
    compute_updates: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """(cluster, body) of every PATCH of a compute: what an update of an existing cluster carried."""
    errors: dict[str, dict[str, Any]] = field(default_factory=dict)
    """job -> the error its run history reports (``fail_job``)."""
    mlflow: MlflowServer | None = None
    """The workspace's MLflow (its tracking URI); every submitted job gets a run there named by the job."""
    tracking_uri: str | None = None
    """What the workspace reports as its MLflow tracking URI when it is not ``mlflow``'s URL."""
    _mlflow_store: Any = None
    run_times: dict[str, dict[str, str]] = field(default_factory=dict)
    """job -> the run history's startTimeUtc / endTimeUtc, stamped as the job's status moves."""
    operations: dict[str, list[str]] = field(default_factory=dict)
    """operation -> the states it still answers before ``Succeeded`` (cluster updates)."""
    pending_scales: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    """operation -> (cluster, scale settings) applied when the update succeeds."""
    update_polls: int = 2
    """How many times a cluster update's operation answers ``InProgress`` first."""
    before_running: list[str] = field(default_factory=lambda: ["NotStarted", "Preparing", "Queued"])
    """The states a new job goes through before it runs, as the REST examples show them: the PUT answers the first,
    and each read of the job moves it one on, until it is ``Queued`` (where it waits) or a test sets its state."""
    status_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    """Held while a job's state moves (a read moving it on must not undo a state a test sets meanwhile)."""
    compute_write: bool = True
    """Whether the caller's role may write computes: False is the built-in AzureML Data Scientist role, whose
    NotActions hold ``workspaces/computes/write`` (a PUT or PATCH of a compute is refused with 403)."""
    update_outcome: str = "Succeeded"
    """How a cluster update's operation ends (``Failed``: the scale settings stay as they were)."""
    cancel_s: float = 0.3
    """How long a cancelled job stays ``CancelRequested`` before ``Canceled`` (Azure ML: the job's processes are
    signalled and its nodes released first)."""
    held_cancels: set[str] = field(default_factory=set)
    """Jobs whose ``CancelRequested`` lasts until they leave this set, however slow the machine."""
    cancel_requests: dict[str, int] = field(default_factory=dict)
    """job -> how many cancel requests named it."""
    create_error: dict[str, Any] | None = None
    """The error a cluster creation ends with (``{"code", "message"}``): its operation answers ``InProgress`` once,
    then ``Failed`` with it, and the cluster stays, ``Failed``, with it in its ``provisioningErrors``, as Azure
    leaves a cluster whose nodes could not be set up. None: created at once."""
    usage_page: int = 5
    """Rows per page of the usage list (the rig's rows take several pages)."""
    usages: list[dict[str, Any]] = field(default_factory=rig_usages)
    """The region's quota rows, as ``Usages - List`` answers them (``set_usage`` changes one)."""

    def set_usage(self, name: str, *, limit: int, current: int | None = None) -> None:
        """Set the limit (and use) of the subscription-level usage row named ``name`` (its ``name.value``)."""
        rows = [r for r in self.usages if r["name"]["value"] == name and "/workspaces/" not in r["id"]]
        assert rows, f"no usage row named {name!r}"
        for row in rows:
            row["limit"] = limit
            if current is not None:
                row["currentValue"] = current

    def serverless_refusal(self, props: dict[str, Any]) -> dict[str, Any] | None:
        """Azure ML's error for a serverless job whose VM family (or, for Spot, the region's low-priority pool) has
        less quota than its nodes need: refused at submission ("If you don't have quota for your specified VM size,
        you see an error": how-to-use-serverless-compute, "Quota", read 2026-12-06). The docs do not print the error;
        its form is AzureML Compute's refusal of a job's node count (``JobNodeCountExceedsCoreQuota``, as users
        report it). A job whose quota is enough but in use by other jobs is accepted and waits ``Queued``. None: no
        refusal (a size or row the rig does not know is let through)."""
        resources = props.get("resources") or {}
        wanted = str(resources.get("instanceType") or "").lower()
        size = next((s for s in VM_SIZES if s["name"].lower() == wanted), None)
        if size is None:
            return None
        nodes = int(resources.get("instanceCount") or 1)
        needed = size["vCPUs"] * nodes
        spot = str((props.get("queueSettings") or {}).get("jobTier") or "").lower() == "spot"
        family = re.sub(r"^standard|family$", "", size["family"], flags=re.I)
        name = (
            "Total Cluster LowPriority Regional vCPUs" if spot else f"Standard {family} Family Cluster Dedicated vCPUs"
        )
        label = "low priority" if spot else f"Standard {family} family"
        row = next((r for r in self.usages if r["name"]["value"] == name and "/workspaces/" not in r["id"]), None)
        if row is None or row["limit"] < 0 or row["limit"] >= needed:
            return None
        said = (
            f"The specified subscription has a {label} vCPU quota of {row['limit']} and is less "
            f"than the requested job node count of {nodes} which maps to {needed} vCPUs. Talk to your Subscription "
            "Admin or refer to https://docs.microsoft.com/azure/machine-learning/how-to-manage-quotas#request-quota-"
            f"increases to increase the {label} vCPU quota"
        )
        message = f"Job submission to AzureML Compute encountered an Exception with status code {QUOTA_REFUSED}, {said}"
        return {"code": "UserError", "message": message, "details": [{"code": QUOTA_REFUSED, "message": said}]}

    # -- blob side -----------------------------------------------------------------------------
    def container_sas(self, container: str | None = None) -> str:
        from azure.storage.blob import ContainerSasPermissions, generate_container_sas

        return generate_container_sas(
            ACCOUNT,
            container or self.container,
            account_key=ACCOUNT_KEY,
            permission=ContainerSasPermissions(read=True, write=True, list=True, create=True, add=True),
            expiry=datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=2),
        )

    def datastore_container(self, datastore: str) -> str:
        """The container behind one of the workspace's blob datastores."""
        containers = {"workspaceblobstore": self.container, "workspaceartifactstore": self.artifact_container}
        if datastore not in containers:
            raise ValueError(f"the rig's workspace has no blob datastore {datastore!r}")
        return containers[datastore]

    def container_client(self, container: str | None = None) -> Any:
        from azure.storage.blob import ContainerClient

        conn = (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint={self.blob_endpoint};"
        )
        return ContainerClient.from_connection_string(conn, container or self.container)

    def write_log(self, job: str, process: int, text: str) -> None:
        """Append to a job's ``std_log_process_NN.txt`` (zero-padded, as the runtime names them) in its artifact
        folder on Azurite (an append blob, as Azure ML writes them while the job runs) and list it in the run's
        log files."""
        name = f"user_logs/{log_name(process)}"
        blob = self.container_client(self.artifact_container).get_blob_client(f"ExperimentRun/dcid.{job}/{name}")
        if not blob.exists():
            blob.create_append_blob()
        blob.append_block(text.encode())
        self.log_files.setdefault(job, {})[name] = f"{blob.url}?{self.container_sas(self.artifact_container)}"

    def overwrite_log(self, job: str, process: int, text: str) -> None:
        """The process's log file written anew with ``text``, as Azure ML writes it when it restarts a preempted
        job on new nodes."""
        name = f"user_logs/{log_name(process)}"
        blob = self.container_client(self.artifact_container).get_blob_client(f"ExperimentRun/dcid.{job}/{name}")
        time.sleep(1.1)  # the blob's creation time has a one-second resolution
        blob.create_append_blob()  # replaces the file: a new, empty one
        blob.append_block(text.encode())

    def start_mlflow_run(self, job: str, experiment: str) -> None:
        """The job's MLflow run, with the job's name as its id (as Azure ML's tracking store has it). A stock
        MLflow server makes up run ids, so the run is created in the server's own SQLite store with that id."""
        from unittest import mock

        from mlflow.exceptions import MlflowException
        from mlflow.store.tracking import sqlalchemy_store
        from mlflow.utils.time import get_current_time_millis

        assert self.mlflow is not None
        if self._mlflow_store is None:
            self._mlflow_store = sqlalchemy_store.SqlAlchemyStore(
                f"sqlite:///{self.mlflow.root / 'mlflow.db'}", str(self.mlflow.root / "artifacts")
            )
        store = self._mlflow_store
        found = store.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else store.create_experiment(experiment)
        with contextlib.suppress(MlflowException):  # the server lives for the session: a run id is one test's
            store.get_run(job)
            raise AssertionError(f"an earlier test already made an MLflow run {job}: give each test its own job names")
        with mock.patch.object(sqlalchemy_store.uuid, "uuid4", return_value=mock.Mock(hex=job)):
            store.create_run(experiment_id, "rig", get_current_time_millis(), [], job)

    def code_location(self, job: str) -> tuple[str, str]:
        """The container and folder of the code snapshot the job ``job`` names (its code asset's codeUri)."""
        code_id = self.jobs[job]["properties"]["codeId"].split("/")
        code_uri = urlparse(self.codes[f"{code_id[-3]}/{code_id[-1]}"]["properties"]["codeUri"])
        container, prefix = code_uri.path.split("/", 3)[2:]
        return container, prefix

    def submitted_job(self, job: str, into: Path) -> dict[str, Any]:
        """The job as a node gets it: what the service received, in the CLI v2 shape the launchers of
        azure_launchers.py take, with its code snapshot downloaded from the blob store into ``into``."""
        props = self.jobs[job]["properties"]
        assert not props.get("inputs"), "submitted_job does not rebuild inputs: give the job none"
        container, prefix = self.code_location(job)
        client = self.container_client(container)
        for blob in client.list_blobs(name_starts_with=prefix + "/"):
            target = into / blob.name[len(prefix) + 1 :]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(client.download_blob(blob.name).readall())
        outputs = {
            name: {
                "type": out["jobOutputType"],
                "mode": OUTPUT_MODES[out["mode"]],
                **({"path": out["uri"]} if out.get("uri") else {}),
            }
            for name, out in props.get("outputs", {}).items()
            if name != "default"
        }
        return {
            "name": job,
            "code": str(into),
            "command": props["command"],
            "environment_variables": props.get("environmentVariables", {}),
            "distribution": {
                "type": props["distribution"]["distributionType"].lower(),
                "process_count_per_instance": props["distribution"]["processCountPerInstance"],
            },
            "resources": {"instance_count": props["resources"]["instanceCount"]},
            "outputs": outputs,
            "tags": props.get("tags", {}),
        }

    def set_job_status(self, job: str, status: str, at: datetime.datetime | None = None) -> None:
        """Move a job to ``status``; the run history stamps startTimeUtc when it first runs (or at ``at``, given)
        and endTimeUtc when it ends (``at``, default now), as Azure ML's run history reports them."""
        with self.status_lock:
            self.jobs[job]["properties"]["status"] = status
        when = (at or datetime.datetime.now(datetime.timezone.utc)).isoformat()
        times = self.run_times.setdefault(job, {})
        if status in ("Running", "Finalizing"):
            times["startTimeUtc"] = when if at is not None else times.get("startTimeUtc", when)
            times.pop("endTimeUtc", None)
        elif status in ("Completed", "Failed", "Canceled"):
            times.setdefault("startTimeUtc", when)
            times["endTimeUtc"] = when

    def fail_job(self, job: str, message: str, code: str = "UserError") -> None:
        """The job fails with ``message``, which its run history reports as Azure ML does (``error.error``)."""
        self.errors[job] = {
            "error": {"code": code, "message": message, "messageParameters": {}, "details": []},
            "time": _now(),
            "componentName": "CommonRuntime",
        }
        self.set_job_status(job, "Failed")


class WorkspaceAdapter(BaseAdapter):
    def __init__(self, model: WorkspaceModel) -> None:
        super().__init__()
        self.model = model

    def close(self) -> None:
        pass

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        url = urlparse(request.url)
        body = json.loads(request.body) if request.body else None
        status, payload, headers = self.answer(request.method or "GET", url.netloc, url.path, parse_qs(url.query), body)
        content = json.dumps(payload).encode() if payload is not None else b""
        all_headers = {"Content-Type": "application/json", "Content-Length": str(len(content)), **headers}
        raw = urllib3.HTTPResponse(
            body=io.BytesIO(content), headers=all_headers, status=status, preload_content=False, decode_content=False
        )
        return self.build_response(request, raw)

    def answer(self, method: str, host: str, path: str, query: dict[str, list[str]], body: Any) -> Answer:
        """A request to the workspace: recorded, answered by an injected fault once, else by its route."""
        self.model.calls.append((method, path))
        self.model.sent.append((method, f"{host}{path}?{json.dumps(query)}", json.dumps(body)))
        fault = next((f for f in self.model.faults if f[0] == method and f[1] in path), None)
        if fault is None:
            return self.route(method, host, path, query, body)
        self.model.faults.remove(fault)
        code = "TooManyRequests" if fault[2] == 429 else "ServerError"
        return fault[2], {"error": {"code": code, "message": "injected"}}, {"Retry-After": "0"}

    def build_response(self, request: requests.PreparedRequest, raw: Any) -> requests.Response:
        resp = requests.Response()
        resp.status_code = raw.status
        resp.headers = requests.structures.CaseInsensitiveDict(raw.headers)
        resp.raw = raw
        resp.url = request.url or ""
        resp.request = request
        resp.encoding = "utf-8"
        return resp

    def _not_found(self, what: str) -> Answer:
        return 404, {"error": {"code": "ResourceNotFound", "message": f"{what} not found"}}, {}

    def route(self, method: str, host: str, path: str, query: dict[str, list[str]], body: Any) -> Answer:
        m = self.model
        if host == urlparse(DISCOVERY).netloc:
            return 200, {"api": RUN_HISTORY, "history": RUN_HISTORY, "experimentation": RUN_HISTORY}, {}
        if host == urlparse(RUN_HISTORY).netloc:
            match = re.search(r"/runs/([^/]+)/details$", path)
            if match and match.group(1) in m.jobs:
                job = match.group(1)
                details = {
                    "runId": job,
                    "status": m.jobs[job]["properties"]["status"],
                    "logFiles": m.log_files.get(job, {}),
                    "warnings": [],
                    **m.run_times.get(job, {}),
                }
                if job in m.errors:
                    details["error"] = m.errors[job]
                return 200, details, {}
            return self._not_found(path)
        if path.endswith("/vmSizes"):
            return 200, {"value": copy.deepcopy(VM_SIZES)}, {}
        if path.endswith("/usages"):  # Usages - List, in the REST example's shape (long names, -1 = no limit)
            return self.usages_page(path, query)
        if path.rstrip("/") == WS_PATH and method == "GET":
            props = {
                "discoveryUrl": DISCOVERY,
                "workspaceId": "11111111-1111-1111-1111-111111111111",
                "friendlyName": WS,
            }
            tracking = m.tracking_uri or (m.mlflow.url if m.mlflow is not None else None)
            if tracking:
                props["mlFlowTrackingUri"] = tracking
            return (
                200,
                {
                    "id": WS_PATH,
                    "name": WS,
                    "location": "eastus",
                    "type": "Microsoft.MachineLearningServices/workspaces",
                    "properties": props,
                },
                {},
            )
        if not path.startswith(WS_PATH + "/"):
            m.unhandled.append(f"{method} {host}{path}")
            return self._not_found(path)
        rest = path[len(WS_PATH) + 1 :]
        parts = rest.split("/")
        if parts[0] == "codes":
            return self.codes(method, parts, query, body)
        if parts[0] == "jobs":
            return self.jobs(method, parts, body)
        if parts[0] == "computes":
            return self.computes(method, parts, body)
        if parts[0] == "operations":
            return self.operation(parts[1] if len(parts) > 1 else "")
        if parts[0] == "datastores":
            return self.datastores(method, parts)
        m.unhandled.append(f"{method} {path}")
        return self._not_found(path)

    def usages_page(self, path: str, query: dict[str, list[str]]) -> Answer:
        """One page of the usage list, ``usage_page`` rows, with the ``nextLink`` to the next as ARM pages a list
        (a region has more rows than fit one answer): a reader that stops at the first page misses rows."""
        m = self.model
        start = int(query.get("skip", ["0"])[0])
        page: dict[str, Any] = {"value": copy.deepcopy(m.usages[start : start + m.usage_page])}
        if start + m.usage_page < len(m.usages):
            version = query.get("api-version", ["2024-04-01"])[0]
            page["nextLink"] = f"https://management.azure.com{path}?api-version={version}&skip={start + m.usage_page}"
        return 200, page, {}

    def codes(self, method: str, parts: list[str], query: dict[str, list[str]], body: Any) -> Answer:
        m = self.model
        if method == "GET" and len(parts) == 3:  # codes/<name>/versions?hash=...
            wanted = query.get("hash", [None])[0]
            found = [c for c in m.codes.values() if c["properties"].get("properties", {}).get("hash_sha256") == wanted]
            return 200, {"value": found}, {}
        key = f"{parts[1]}/{parts[3]}"
        if method == "POST" and parts[-1] == "startPendingUpload":
            m.pending_uploads += 1
            folder = f"LocalUpload/{uuid.uuid4().hex}"
            base = f"{m.blob_endpoint}/{m.container}"
            return (
                200,
                {
                    "blobReferenceForConsumption": {
                        "blobUri": f"{base}/{folder}",
                        "storageAccountArmId": None,
                        "credential": {"credentialType": "SAS", "sasUri": f"{base}/{folder}?{m.container_sas()}"},
                    }
                },
                {},
            )
        if method == "PUT":
            resource = {
                "id": f"{WS_PATH}/codes/{key.replace('/', '/versions/')}",
                "name": parts[3],
                "type": "Microsoft.MachineLearningServices/workspaces/codes/versions",
                "properties": body["properties"],
                "systemData": {"createdAt": _now()},
            }
            m.codes[key] = resource
            return 200, resource, {}
        if method == "GET":
            return (200, m.codes[key], {}) if key in m.codes else self._not_found(key)
        return self._not_found(key)

    def datastores(self, method: str, parts: list[str]) -> Answer:
        """A workspace's three datastores: workspaceartifactstore (job logs) and the default workspaceblobstore
        (code, outputs, checkpoints), blob containers with SAS credentials (read with listSecrets; the rig's blobs
        are reached through a forwarder, which an account key's signature would not survive), and
        workspacefilestore, a file share (no container)."""
        m = self.model
        name = parts[1] if len(parts) > 1 else "workspaceblobstore"
        if name == "workspacefilestore":
            return self._file_store(method, parts)
        if name not in ("workspaceblobstore", "workspaceartifactstore"):
            return self._not_found(f"datastore {name}")
        if method == "POST" and parts[-1] == "listSecrets":
            return 200, {"secretsType": "Sas", "sasToken": m.container_sas(m.datastore_container(name))}, {}
        return (
            200,
            {
                "id": f"{WS_PATH}/datastores/{name}",
                "name": name,
                "properties": {
                    "datastoreType": "AzureBlob",
                    "accountName": ACCOUNT,
                    "containerName": m.datastore_container(name),
                    "endpoint": STORAGE_ENDPOINT,
                    "protocol": "http",
                    "isDefault": name == "workspaceblobstore",
                    "credentials": {"credentialsType": "Sas"},
                },
            },
            {},
        )

    def _file_store(self, method: str, parts: list[str]) -> Answer:
        """workspacefilestore, the workspace's Azure Files share (account key credentials, as Azure makes it)."""
        if method == "POST" and parts[-1] == "listSecrets":
            return 200, {"secretsType": "AccountKey", "key": ACCOUNT_KEY}, {}
        properties = {
            "datastoreType": "AzureFile",
            "accountName": ACCOUNT,
            "fileShareName": "code-391ff5ac-6576-460f-ba4d-7e03433c68b6",
            "endpoint": STORAGE_ENDPOINT,
            "protocol": "http",
            "isDefault": False,
            "credentials": {"credentialsType": "AccountKey"},
        }
        return (
            200,
            {"id": f"{WS_PATH}/datastores/workspacefilestore", "name": "workspacefilestore", "properties": properties},
            {},
        )

    def jobs(self, method: str, parts: list[str], body: Any) -> Answer:
        m = self.model
        name = parts[1] if len(parts) > 1 else ""
        if method == "PUT" and name in m.jobs:
            # Jobs - Create Or Update of an existing job is its update: "the Tags in the definition passed in will
            # replace Tags in the existing job" (REST reference; azure-ai-ml's client takes 200 or 201). Nothing
            # else changes: no second run, and the job keeps its status.
            m.jobs[name]["properties"]["tags"] = copy.deepcopy(body["properties"].get("tags") or {})
            return 200, m.jobs[name], {}
        if method == "PUT":
            props = copy.deepcopy(body["properties"])
            if not props.get("computeId") and not props.get("resources", {}).get("instanceType"):
                # serverless compute: the service needs the size the job names, as it has no cluster to read it from
                message = "A job without a compute must give resources.instanceType (serverless compute)"
                return 400, {"error": {"code": "UserError", "message": message}}, {}
            refused = None if props.get("computeId") else m.serverless_refusal(props)
            if refused is not None:
                return 400, {"error": refused}, {}
            studio = {"endpoint": f"https://ml.azure.com/runs/{name}", "jobServiceType": "Studio"}
            props.update(status=m.before_running[0], services={"Studio": studio})
            props.setdefault("outputs", {})["default"] = {  # the service adds the job's artifact folder
                "jobOutputType": "uri_folder",
                "mode": "ReadWriteMount",
                "uri": f"azureml://datastores/workspaceartifactstore/ExperimentRun/dcid.{name}",
            }
            if m.mlflow is not None and name not in m.jobs:
                m.start_mlflow_run(name, props.get("experimentName") or "Default")
            m.jobs[name] = {
                "id": f"{WS_PATH}/jobs/{name}",
                "name": name,
                "type": "Microsoft.MachineLearningServices/workspaces/jobs",
                "properties": props,
                "systemData": {"createdAt": _now(), "createdBy": "rig"},
            }
            return 201, m.jobs[name], {}
        if name not in m.jobs:
            return self._not_found(f"job {name}")
        if method == "POST" and parts[-1] == "cancel":
            m.cancel_requests[name] = m.cancel_requests.get(name, 0) + 1
            if m.jobs[name]["properties"]["status"] not in ("Completed", "Failed", "Canceled", "CancelRequested"):
                m.set_job_status(name, "CancelRequested")
                self._cancel_later(name, m.cancel_s)
            return 202, None, {"Location": f"https://management.azure.com{WS_PATH}/operations/cancel-{name}"}
        if method == "GET" and len(parts) == 2:
            with m.status_lock:
                answer = copy.deepcopy(m.jobs[name])
                status = answer["properties"]["status"]
                if status in m.before_running[:-1]:  # the next read finds it one state on
                    m.jobs[name]["properties"]["status"] = m.before_running[m.before_running.index(status) + 1]
            return 200, answer, {}
        return self._not_found("/".join(parts))

    def _cancel_later(self, name: str, seconds: float) -> None:
        """``CancelRequested`` becomes ``Canceled`` after ``seconds`` (later while the job is held)."""

        def done() -> None:
            if name in self.model.held_cancels:
                self._cancel_later(name, 0.05)
            elif self.model.jobs[name]["properties"]["status"] == "CancelRequested":
                self.model.set_job_status(name, "Canceled")

        timer = threading.Timer(seconds, done)
        timer.daemon = True
        timer.start()

    def computes(self, method: str, parts: list[str], body: Any) -> Answer:
        m = self.model
        name = parts[1] if len(parts) > 1 else ""
        if method in ("PUT", "PATCH") and not m.compute_write:
            action = "Microsoft.MachineLearningServices/workspaces/computes/write"
            message = (
                f"The client 'rig-user' with object id '1111' does not have authorization to perform action "
                f"'{action}' over scope '{WS_PATH}/computes/{name}' or the scope is invalid."
            )
            return 403, {"error": {"code": "AuthorizationFailed", "message": message}}, {}
        if method == "PUT":
            props = copy.deepcopy(body["properties"])
            props["provisioningState"] = "Succeeded" if m.create_error is None else "Creating"
            if m.create_error is not None:
                m.operations[f"compute-{name}"] = ["InProgress"]
            m.computes[name] = {
                "id": f"{WS_PATH}/computes/{name}",
                "name": name,
                "location": body.get("location", "eastus"),
                "type": "Microsoft.MachineLearningServices/workspaces/computes",
                "properties": props,
            }
            op = f"https://management.azure.com{WS_PATH}/operations/compute-{name}"
            return 201, m.computes[name], {"Azure-AsyncOperation": op, "Retry-After": "1"}
        if method == "PATCH" and name in m.computes:  # Compute - Update: only scale settings can change
            return self.update_compute(name, body)
        if method == "GET" and name in m.computes:
            return 200, m.computes[name], {}
        return self._not_found(f"compute {name}")

    def update_compute(self, name: str, body: Any) -> Answer:
        """``Compute - Update`` as the REST example (``Compute/patch.json``) answers it: its status (200), the
        cluster with ``provisioningState: Updating`` and an ``Azure-AsyncOperation`` header. The operation
        answers ``InProgress`` ``update_polls`` times, then ``update_outcome``; on ``Succeeded`` the new scale settings
        apply."""
        m = self.model
        m.compute_updates.append((name, copy.deepcopy(body)))
        op = f"compute-update-{name}-{len(m.compute_updates)}"
        m.operations[op] = ["InProgress"] * m.update_polls
        m.pending_scales[op] = (name, copy.deepcopy(body["properties"]["properties"]["scaleSettings"]))
        compute = m.computes[name]
        compute["properties"]["provisioningState"] = "Updating"
        example = rest_example("compute_patch")
        answer = {key: compute[key] for key in example["body"] if key in compute}
        answer["properties"] = {
            "computeType": compute["properties"].get("computeType", "AmlCompute"),
            "provisioningState": "Updating",
        }
        headers = {key: f"https://management.azure.com{WS_PATH}/operations/{op}" for key in example["headers"]}
        return example["status"], answer, headers

    def operation(self, op: str) -> Answer:
        """An asynchronous operation's status: a cluster update's as ``update_compute`` queued it, a creation's as
        ``create_error`` says; others done."""
        m = self.model
        if m.operations.get(op):
            return 200, {"name": op, "status": m.operations[op].pop(0)}, {"Retry-After": "1"}
        created = op.removeprefix("compute-")
        if m.create_error is not None and op == f"compute-{created}" and created in m.computes:
            props = m.computes[created]["properties"]
            props["provisioningState"] = "Failed"
            props["provisioningErrors"] = [{"error": m.create_error}]
            return 200, {"name": op, "status": "Failed", "error": m.create_error}, {"Retry-After": "1"}
        if op not in m.pending_scales:
            return 200, {"name": op, "status": "Succeeded"}, {}
        name, scale = m.pending_scales.pop(op)
        if m.update_outcome == "Succeeded":
            m.computes[name]["properties"]["properties"]["scaleSettings"] = scale
        m.computes[name]["properties"]["provisioningState"] = m.update_outcome
        return 200, {"name": op, "status": m.update_outcome}, {}


class _Forwarder(BaseAdapter):
    """Sends each request the SDK makes to ``base`` (same path and query) over a real HTTP session."""

    def __init__(self, base: str) -> None:
        super().__init__()
        self.base = base.rstrip("/")
        self.session = requests.Session()

    def close(self) -> None:
        self.session.close()

    def _headers(self, request: requests.PreparedRequest) -> dict[str, str]:
        return {k: v for k, v in request.headers.items() if k.lower() != "host"}

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        url = urlparse(request.url)
        return self.session.request(
            request.method or "GET",
            f"{self.base}{url.path}" + (f"?{url.query}" if url.query else ""),
            headers=self._headers(request),
            data=request.body,
            timeout=kwargs.get("timeout") or 30,
            stream=bool(kwargs.get("stream")),
            allow_redirects=False,
        )


class BlobForwarder(_Forwarder):
    """The storage account of the workspace's datastores (``http://devstoreaccount1.blob.rig.invalid``),
    forwarded to Azurite (path-style, the account in the path); requests are signed with a SAS, which
    does not depend on the URL's style."""

    def __init__(self, blob_endpoint: str) -> None:
        super().__init__(blob_endpoint)
        self.ranges: list[tuple[str, str]] = []
        """(path, x-ms-range) of every ranged blob read: what each read asked for."""

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        if request.method == "GET" and "x-ms-range" in request.headers:
            self.ranges.append((urlparse(request.url).path, request.headers["x-ms-range"]))
        return super().send(request, **kwargs)


class RigForwarder(_Forwarder):
    """Azure ML's hosts (management, discovery, run history), forwarded to the workspace served over HTTP by
    :func:`serve`, with the host the SDK asked for in a header (the workspace answers by host)."""

    def _headers(self, request: requests.PreparedRequest) -> dict[str, str]:
        return {**super()._headers(request), HOST_HEADER: urlparse(request.url).netloc}


@contextmanager
def serve(model: WorkspaceModel) -> Iterator[str]:
    """The workspace over HTTP on 127.0.0.1 (a thread of this process), for the SDK in other processes: each
    request is answered by the same routes the in-process adapter uses, one at a time. Yields its URL."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    adapter = WorkspaceAdapter(model)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            url = urlparse(self.path)
            with lock:
                status, payload, headers = adapter.answer(
                    self.command,
                    self.headers.get(HOST_HEADER, ""),
                    url.path,
                    parse_qs(url.query),
                    json.loads(raw) if raw else None,
                )
            content = json.dumps(payload).encode() if payload is not None else b""
            self.send_response(status)
            for key, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        do_GET = do_PUT = do_POST = do_PATCH = do_DELETE = answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="azure-rig", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def served_transport() -> Any:
    """The transport factory for ``CLOUDDDP_AZURE_TRANSPORT``: Azure ML's hosts go to the served workspace
    (``CLOUDDDP_TEST_AZURE_RIG``), the datastores' account to Azurite (``CLOUDDDP_TEST_AZURE_BLOB``); other
    URLs (Azurite's SAS URLs) go out for real."""
    from azure.core.pipeline.transport import RequestsTransport

    session = requests.Session()
    forwarder = RigForwarder(os.environ[RIG_URL])
    for prefix in ML_HOSTS:
        session.mount(prefix, forwarder)
    session.mount(ACCOUNT_URL, BlobForwarder(os.environ[RIG_BLOB]))
    return RequestsTransport(session=session, session_owner=False)


@contextlib.contextmanager
def served_to_processes(blob_endpoint: str, mlflow: Any, monkeypatch: Any) -> Iterator[WorkspaceModel]:
    """A workspace with its MLflow served over HTTP, and this process's environment pointing cloudddp at it, which
    the CLI and the recovery watcher it starts (polling every half second) inherit."""
    model = WorkspaceModel(blob_endpoint)
    create_container(model)
    model.mlflow = mlflow
    with serve(model) as url:
        for key, value in {**served_environment(url, model), "CLOUDDDP_RECOVERY_POLL": "0.5"}.items():
            monkeypatch.setenv(key, value)
        yield model


def served_environment(rig_url: str, model: WorkspaceModel) -> dict[str, str]:
    """What a ``cloudddp`` process (the CLI, a recovery watcher) needs to use the served workspace through the
    Azure ML backend's two extension points, with no credential or transport passed in code."""
    return {
        **env_for_rig(),
        "CLOUDDDP_AZURE_CREDENTIAL": "tests.support.azure_rig:FakeCredential",
        "CLOUDDDP_AZURE_TRANSPORT": "tests.support.azure_rig:served_transport",
        RIG_URL: rig_url,
        RIG_BLOB: model.blob_endpoint,
    }


def ml_transport(model: WorkspaceModel) -> Any:
    """A RequestsTransport whose session answers Azure ML from ``model`` and forwards the datastores' account
    to Azurite; other URLs (Azurite's SAS URLs) go out for real."""
    from azure.core.pipeline.transport import RequestsTransport

    session = requests.Session()
    adapter = WorkspaceAdapter(model)
    for prefix in ML_HOSTS:
        session.mount(prefix, adapter)
    session.mount(ACCOUNT_URL, BlobForwarder(model.blob_endpoint))
    return RequestsTransport(session=session, session_owner=False)


def create_container(model: WorkspaceModel) -> None:
    """The workspace's blob containers on Azurite: the default datastore's and the artifact store's."""
    for name in (model.container, model.artifact_container):
        client = model.container_client(name)
        if not client.exists():
            client.create_container()


def env_for_rig() -> dict[str, str]:
    return {
        "AZURE_SUBSCRIPTION_ID": SUB,
        "AZURE_RESOURCE_GROUP": RG,
        "AZUREML_WORKSPACE_NAME": WS,
        "AZUREML_LOG_LEVEL": "ERROR",
    }


def rig_backend(model: WorkspaceModel, token: str | None = None, poll: float = 0.05) -> Any:
    """The Azure ML backend in this process against ``model``: the rig's credential and transport, this
    machine's registry, ``token`` for its run ids, polling every ``poll`` seconds."""
    from cloudddp.backends.azureml import AzureMLBackend
    from cloudddp.runs.database import RunDatabase

    return AzureMLBackend(
        records=RunDatabase(),
        credential=FakeCredential(),
        transport=ml_transport(model),
        poll_seconds=poll,
        token=token,
    )
