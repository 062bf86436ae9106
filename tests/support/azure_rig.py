"""An offline Azure ML workspace for the real azure-ai-ml SDK, with blobs on a real Azurite server.

``WorkspaceAdapter`` is a requests adapter mounted on the session behind
``azure.core.pipeline.transport.RequestsTransport``: it answers the Azure ML REST routes the SDK calls
(workspace, code versions with the content-hash lookup and startPendingUpload, jobs, cancel, computes
with async provisioning, VM sizes, usages, the discovery document and run history) from an in-memory
model. Blob traffic (code snapshots, log files) goes to Azurite over real HTTP.
"""

from __future__ import annotations

import copy
import datetime
import io
import json
import re
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import requests
import requests.structures
import urllib3
from requests.adapters import BaseAdapter

from .cli import ROOT

ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
SUB, RG, WS = "00000000-0000-0000-0000-000000000000", "ml-rg", "ml-workspace"
WS_PATH = f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.MachineLearningServices/workspaces/{WS}"
DISCOVERY = "https://discovery.rig.invalid/discovery/workspaces/abc"
RUN_HISTORY = "https://runhistory.rig.invalid"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def azurite_binary() -> str | None:
    return shutil.which("azurite-blob") or (str(p) if (p := ROOT / "node_modules" / ".bin" / "azurite-blob").exists() else None)


@contextmanager
def azurite(tmp: Path) -> Iterator[str]:
    binary = azurite_binary()
    assert binary, "Azurite is not installed: `make test` installs it with `npm install`"
    port = free_port()
    proc = subprocess.Popen([binary, "--silent", "--disableTelemetry", "--skipApiVersionCheck", "--location", str(tmp),
                             "--blobHost", "127.0.0.1", "--blobPort", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        raise RuntimeError("Azurite did not start")
    try:
        yield f"http://127.0.0.1:{port}/{ACCOUNT}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


class FakeCredential:
    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        return AccessToken("rig-token", int(time.time()) + 3600)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


@dataclass
class WorkspaceModel:
    blob_endpoint: str
    container: str = "azureml-blobstore-rig"
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)  # "name/version" -> resource
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    computes: dict[str, dict[str, Any]] = field(default_factory=dict)
    log_files: dict[str, dict[str, str]] = field(default_factory=dict)  # job -> file -> SAS url
    calls: list[tuple[str, str]] = field(default_factory=list)
    unhandled: list[str] = field(default_factory=list)
    pending_uploads: int = 0
    faults: list[tuple[str, str, int]] = field(default_factory=list)
    """(method, path fragment, status) answered once, before the real route: throttling and 5xx."""
    run_times: dict[str, dict[str, str]] = field(default_factory=dict)
    """job -> the run history's startTimeUtc / endTimeUtc, stamped as the job's status moves."""

    # -- blob side -----------------------------------------------------------------------------
    def container_sas(self) -> str:
        from azure.storage.blob import ContainerSasPermissions, generate_container_sas

        return generate_container_sas(ACCOUNT, self.container, account_key=ACCOUNT_KEY,
                                      permission=ContainerSasPermissions(read=True, write=True, list=True, create=True, add=True),
                                      expiry=datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=2))

    def container_client(self) -> Any:
        from azure.storage.blob import ContainerClient

        conn = f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};BlobEndpoint={self.blob_endpoint};"
        return ContainerClient.from_connection_string(conn, self.container)

    def write_log(self, job: str, process: int, text: str) -> None:
        """Append to a job's std_log_process_N.txt on Azurite and list it in the run's log files."""
        name = f"user_logs/std_log_process_{process}.txt"
        blob = self.container_client().get_blob_client(f"ExperimentRun/dcid.{job}/{name}")
        old = blob.download_blob().readall().decode() if blob.exists() else ""
        blob.upload_blob((old + text).encode(), overwrite=True)
        self.log_files.setdefault(job, {})[name] = f"{blob.url}?{self.container_sas()}"

    def set_job_status(self, job: str, status: str, at: datetime.datetime | None = None) -> None:
        """Move a job to ``status``; the run history stamps startTimeUtc when it first runs (or at ``at``, given)
        and endTimeUtc when it ends (``at``, default now), as Azure ML's run history reports them."""
        self.jobs[job]["properties"]["status"] = status
        when = (at or datetime.datetime.now(datetime.timezone.utc)).isoformat()
        times = self.run_times.setdefault(job, {})
        if status in ("Running", "Finalizing"):
            times["startTimeUtc"] = when if at is not None else times.get("startTimeUtc", when)
            times.pop("endTimeUtc", None)
        elif status in ("Completed", "Failed", "Canceled"):
            times.setdefault("startTimeUtc", when)
            times["endTimeUtc"] = when


class WorkspaceAdapter(BaseAdapter):
    def __init__(self, model: WorkspaceModel) -> None:
        super().__init__()
        self.model = model

    def close(self) -> None:
        pass

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        url = urlparse(request.url)
        body = json.loads(request.body) if request.body else None
        self.model.calls.append((request.method or "", url.path))
        fault = next((f for f in self.model.faults if f[0] == request.method and f[1] in url.path), None)
        if fault is not None:
            self.model.faults.remove(fault)
            status, payload, headers = fault[2], {"error": {"code": "TooManyRequests" if fault[2] == 429 else "ServerError",
                                                            "message": "injected"}}, {"Retry-After": "0"}
        else:
            status, payload, headers = self.route(request.method or "GET", url.netloc, url.path, parse_qs(url.query), body)
        content = json.dumps(payload).encode() if payload is not None else b""
        all_headers = {"Content-Type": "application/json", "Content-Length": str(len(content)), **headers}
        raw = urllib3.HTTPResponse(body=io.BytesIO(content), headers=all_headers, status=status,
                                   preload_content=False, decode_content=False)
        return self.build_response(request, raw)

    def build_response(self, request: requests.PreparedRequest, raw: Any) -> requests.Response:
        resp = requests.Response()
        resp.status_code = raw.status
        resp.headers = requests.structures.CaseInsensitiveDict(raw.headers)
        resp.raw = raw
        resp.url = request.url or ""
        resp.request = request
        resp.encoding = "utf-8"
        return resp

    def _not_found(self, what: str) -> tuple[int, Any, dict[str, str]]:
        return 404, {"error": {"code": "ResourceNotFound", "message": f"{what} not found"}}, {}

    def route(self, method: str, host: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any, dict[str, str]]:
        m = self.model
        if host == urlparse(DISCOVERY).netloc:
            return 200, {"api": RUN_HISTORY, "history": RUN_HISTORY, "experimentation": RUN_HISTORY}, {}
        if host == urlparse(RUN_HISTORY).netloc:
            match = re.search(r"/runs/([^/]+)/details$", path)
            if match and match.group(1) in m.jobs:
                job = match.group(1)
                return 200, {"runId": job, "status": m.jobs[job]["properties"]["status"],
                             "logFiles": m.log_files.get(job, {}), **m.run_times.get(job, {})}, {}
            return self._not_found(path)
        if path.endswith("/vmSizes"):
            return 200, {"value": [{"name": "Standard_ND96asr_v4", "family": "standardNDASv4_A100Family", "vCPUs": 96,
                                    "gpus": 8, "memoryGB": 900, "lowPriorityCapable": True},
                                   {"name": "Standard_NC96ads_A100_v4", "family": "standardNCADSA100v4Family",
                                    "vCPUs": 96, "gpus": 4, "memoryGB": 880, "lowPriorityCapable": True}]}, {}
        if path.endswith("/usages"):
            return 200, {"value": [{"name": {"value": "standardNDASv4_A100Family", "localizedValue": "NDASv4_A100"},
                                    "currentValue": 0, "limit": 192, "unit": "Count"}]}, {}
        if path.rstrip("/") == WS_PATH and method == "GET":
            return 200, {"id": WS_PATH, "name": WS, "location": "eastus", "type": "Microsoft.MachineLearningServices/workspaces",
                         "properties": {"discoveryUrl": DISCOVERY, "workspaceId": "11111111-1111-1111-1111-111111111111",
                                        "friendlyName": WS}}, {}
        if not path.startswith(WS_PATH + "/"):
            m.unhandled.append(f"{method} {host}{path}")
            return self._not_found(path)
        rest = path[len(WS_PATH) + 1:]
        parts = rest.split("/")
        if parts[0] == "codes":
            return self.codes(method, parts, query, body)
        if parts[0] == "jobs":
            return self.jobs(method, parts, body)
        if parts[0] == "computes":
            return self.computes(method, parts, body)
        if parts[0] == "operations":
            return 200, {"status": "Succeeded"}, {}
        if parts[0] == "datastores":
            return 200, {"id": f"{WS_PATH}/datastores/workspaceblobstore", "name": "workspaceblobstore",
                         "properties": {"datastoreType": "AzureBlob", "accountName": ACCOUNT, "containerName": m.container,
                                        "endpoint": "core.windows.net", "protocol": "http", "isDefault": True,
                                        "credentials": {"credentialsType": "None"}}}, {}
        m.unhandled.append(f"{method} {path}")
        return self._not_found(path)

    def codes(self, method: str, parts: list[str], query: dict[str, list[str]], body: Any) -> tuple[int, Any, dict[str, str]]:
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
            return 200, {"blobReferenceForConsumption": {
                "blobUri": f"{base}/{folder}", "storageAccountArmId": None,
                "credential": {"credentialType": "SAS", "sasUri": f"{base}/{folder}?{m.container_sas()}"}}}, {}
        if method == "PUT":
            resource = {"id": f"{WS_PATH}/codes/{key.replace('/', '/versions/')}", "name": parts[3],
                        "type": "Microsoft.MachineLearningServices/workspaces/codes/versions",
                        "properties": body["properties"], "systemData": {"createdAt": _now()}}
            m.codes[key] = resource
            return 200, resource, {}
        if method == "GET":
            return (200, m.codes[key], {}) if key in m.codes else self._not_found(key)
        return self._not_found(key)

    def jobs(self, method: str, parts: list[str], body: Any) -> tuple[int, Any, dict[str, str]]:
        m = self.model
        name = parts[1] if len(parts) > 1 else ""
        if method == "PUT":
            props = copy.deepcopy(body["properties"])
            props.update(status="Queued", services={"Studio": {"endpoint": f"https://ml.azure.com/runs/{name}", "jobServiceType": "Studio"}})
            m.jobs[name] = {"id": f"{WS_PATH}/jobs/{name}", "name": name, "type": "Microsoft.MachineLearningServices/workspaces/jobs",
                            "properties": props, "systemData": {"createdAt": _now(), "createdBy": "rig"}}
            return 201, m.jobs[name], {}
        if name not in m.jobs:
            return self._not_found(f"job {name}")
        if method == "POST" and parts[-1] == "cancel":
            m.set_job_status(name, "Canceled")
            return 202, None, {"Location": f"https://management.azure.com{WS_PATH}/operations/cancel-{name}"}
        if method == "GET" and len(parts) == 2:
            return 200, m.jobs[name], {}
        return self._not_found("/".join(parts))

    def computes(self, method: str, parts: list[str], body: Any) -> tuple[int, Any, dict[str, str]]:
        m = self.model
        name = parts[1] if len(parts) > 1 else ""
        if method == "PUT":
            props = copy.deepcopy(body["properties"])
            props["provisioningState"] = "Succeeded"
            m.computes[name] = {"id": f"{WS_PATH}/computes/{name}", "name": name, "location": body.get("location", "eastus"),
                                "type": "Microsoft.MachineLearningServices/workspaces/computes", "properties": props}
            op = f"https://management.azure.com{WS_PATH}/operations/compute-{name}"
            return 201, m.computes[name], {"Azure-AsyncOperation": op}
        if method == "GET" and name in m.computes:
            return 200, m.computes[name], {}
        return self._not_found(f"compute {name}")


def ml_transport(model: WorkspaceModel) -> Any:
    """A RequestsTransport whose session answers Azure ML from ``model``; other URLs (Azurite) go out for real."""
    from azure.core.pipeline.transport import RequestsTransport

    session = requests.Session()
    adapter = WorkspaceAdapter(model)
    for prefix in ("https://management.azure.com", DISCOVERY.rsplit("/discovery", 1)[0], RUN_HISTORY):
        session.mount(prefix, adapter)
    return RequestsTransport(session=session, session_owner=False)


def create_container(model: WorkspaceModel) -> None:
    client = model.container_client()
    if not client.exists():
        client.create_container()


def env_for_rig() -> dict[str, str]:
    return {"AZURE_SUBSCRIPTION_ID": SUB, "AZURE_RESOURCE_GROUP": RG, "AZUREML_WORKSPACE_NAME": WS,
            "AZUREML_LOG_LEVEL": "ERROR"}
