"""A workspace datastore's blob container, opened with public APIs only: ``datastores.get(include_secrets=True)``
gives the storage account, the container and a key or SAS; where the datastore is identity-based, or the caller
may not read its secrets (403), the caller's own Entra credential signs the requests. What reads a job's logs
(logs.py) and what carries a training's checkpoints (checkpoint_store.py) both open their container here.
"""

from __future__ import annotations

from typing import Any

from cloudddp.errors import CloudDDPError


def blob_container(
    ml_client: Any, store: str, credential: Any, transport: Any, *, holds: str, fix: str, **settings: Any
) -> Any:
    """The ``ContainerClient`` of datastore ``store``, sending through ``transport`` (None: azure-core's own);
    ``settings`` are the client's (block and chunk sizes). A CloudDDPError, naming ``holds`` (what is on the
    datastore) and ``fix``, when the datastore is not a blob container (a file share, a data lake)."""
    from azure.core.exceptions import HttpResponseError
    from azure.storage.blob import ContainerClient

    try:
        datastore = ml_client.datastores.get(store, include_secrets=True)
    except HttpResponseError as e:
        if e.status_code != 403:
            raise
        datastore = ml_client.datastores.get(store)  # no permission to read its secrets: use ours
    container_name = getattr(datastore, "container_name", None)
    if not container_name:
        raise CloudDDPError(
            f"{holds} on datastore {store} ({type(datastore).__name__}), which is not a blob container; {fix}"
        )
    creds = getattr(datastore, "credentials", None)
    secret = getattr(creds, "account_key", None) or getattr(creds, "sas_token", None) or credential
    endpoint = datastore.endpoint or "core.windows.net"
    account_url = f"{datastore.protocol or 'https'}://{datastore.account_name}.blob.{endpoint}"
    kwargs = {"transport": transport} if transport is not None else {}
    return ContainerClient(account_url, container_name, credential=secret, **kwargs, **settings)
