"""A job's run details from Azure ML's run history: where the service says why a job failed.

The management API's job resource has a status but no error. The error is in the run history, which
azure-ai-ml's own ``jobs.stream`` reads (``RunDetails.error``) through a private attribute; this reads it
the same way with public APIs only: the workspace's ``discovery_url`` (``ml_client.workspaces.get``), whose
document names the ``api`` endpoint, then ``GET {api}/history/v1.0/subscriptions/<s>/resourceGroups/<g>/
providers/Microsoft.MachineLearningServices/workspaces/<w>/runs/<job>/details`` through azure-core's
pipeline, signed in with the MLClient's credential for Azure ML's scope and sent on its transport.
"""

from __future__ import annotations

from typing import Any

from .workspace import Workspace

SCOPE = "https://ml.azure.com/.default"  # the run history client's scope in azure-ai-ml


def _pipeline(credential: Any | None, transport: Any | None) -> Any:
    from azure.core import PipelineClient
    from azure.core.pipeline.policies import (
        BearerTokenCredentialPolicy,
        HeadersPolicy,
        RetryPolicy,
        UserAgentPolicy,
    )

    policies: list[Any] = [HeadersPolicy(), UserAgentPolicy("cloudddp"), RetryPolicy()]
    if credential is not None:
        policies.append(BearerTokenCredentialPolicy(credential, SCOPE))
    return PipelineClient(
        "https://ml.azure.com", policies=policies, **({"transport": transport} if transport is not None else {})
    )


class RunHistory:
    """Run details of one workspace's jobs; the discovery document is read once."""

    def __init__(self, workspace: Workspace, discovery_url: str, credential: Any, transport: Any | None) -> None:
        self.workspace = workspace
        self.discovery_url = discovery_url
        self.credential = credential
        self.transport = transport
        self._api: str | None = None

    def _get(self, url: str, signed: bool) -> dict[str, Any]:
        from azure.core.rest import HttpRequest

        client = _pipeline(self.credential if signed else None, self.transport)
        try:
            response = client.send_request(HttpRequest("GET", url, headers={"Accept": "application/json"}))
            response.raise_for_status()
            data = response.json()
        finally:
            if self.transport is None:  # a transport that was passed in is shared: left open
                client.close()
        return data if isinstance(data, dict) else {}

    def api(self) -> str:
        """The workspace's ``api`` endpoint, as its discovery document names it."""
        if self._api is None:
            self._api = str(self._get(self.discovery_url, signed=False)["api"]).rstrip("/")
        return self._api

    def details(self, run_id: str) -> dict[str, Any]:
        """The run's details (``status``, ``error``, ``warnings``, ...)."""
        ws = self.workspace
        url = (
            f"{self.api()}/history/v1.0/subscriptions/{ws.subscription_id}/resourceGroups/{ws.resource_group}/"
            f"providers/Microsoft.MachineLearningServices/workspaces/{ws.name}/runs/{run_id}/details"
        )
        return self._get(url, signed=True)
