"""The Azure ML backend's SDK side: the credential, the transport, one MLClient per workspace, azure-core's errors
as cloudddp's, and the run history's record of a job.

azure-ai-ml (~2 s to import), azure-identity and azure-core are imported here when a client is first made or an
error is mapped: never at render.
"""

from __future__ import annotations

from typing import Any

from cloudddp.backends.azureml.extensions import credential_from_environment, transport_from_environment
from cloudddp.backends.azureml.workspace import require_workspace
from cloudddp.errors import BackendUnavailable, CloudDDPError

SIGN_IN_FIX = "run `az login`, or set AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET (or use a managed identity)"


class AzureClients:
    """The credential and transport of one backend object (each given, else the one the environment names, else
    azure's default) and the MLClient of each workspace it talks to, made once."""

    def __init__(self, credential: Any = None, transport: Any = None) -> None:
        self._credential = credential
        self._transport = transport
        self._transport_read = transport is not None
        self._clients: dict[tuple[str, str, str], Any] = {}

    def client(self, workspace: dict[str, str]) -> Any:
        """The MLClient of ``workspace`` (a UserError naming what is missing when it is not fully named)."""
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
                self.credential(), ws.subscription_id, ws.resource_group, ws.name, show_progress=False, **kwargs
            )
        return self._clients[key]

    @property
    def transport(self) -> Any:
        """The transport given, else the one ``CLOUDDDP_AZURE_TRANSPORT`` names (made once), else None:
        azure-core's default."""
        if not self._transport_read:
            self._transport, self._transport_read = transport_from_environment(), True
        return self._transport

    def credential(self) -> Any:
        """The credential given, else the one ``CLOUDDDP_AZURE_CREDENTIAL`` names, else
        ``DefaultAzureCredential`` (made once: it caches its tokens)."""
        if self._credential is None:
            self._credential = credential_from_environment()
        if self._credential is None:
            import logging

            from azure.identity import DefaultAzureCredential

            # azure.identity logs every failed sign-in attempt at length; the error cloudddp prints says what to do.
            logging.getLogger("azure.identity").setLevel(logging.ERROR)
            self._credential = DefaultAzureCredential()
        return self._credential


def run_details(client: Any, run_id: str) -> Any:
    """Job ``run_id``'s record in the run history (a ``RunDetails``: its start and end times, the error of a failed
    job), through ``client`` (an MLClient): where ``az ml job show`` and Studio read why a job failed."""
    # A private attribute of azure-ai-ml, on purpose: the SDK has no public call for a job's run details. The Job
    # that jobs.get returns carries neither the run's times nor its error, and RunOperations is not exported; the
    # SDK's own jobs.stream reads the run details through this same jobs._runs_operations.
    return client.jobs._runs_operations.get_run_details(run_id)


def translate(error: Exception) -> CloudDDPError | None:
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
