"""The Azure ML run record: what launch keeps in a run's info reads back typed from among the other owners' keys,
as a record on disk holds them."""

from __future__ import annotations

import pytest

from cloudddp.backends.azureml import AzureMLBackend
from cloudddp.backends.azureml.record import AzureMLRunInfo
from cloudddp.backends.azureml.workspace import Workspace
from cloudddp.backends.records import MemoryRecords

WORKSPACE = {"subscription_id": "0000-sub", "resource_group": "rg", "name": "ws"}
STORED = {  # a run's info as the run database holds it, written literally: the backend's key, the base class's beside
    "workspace": WORKSPACE,
    "estimate": None,
    "step_key": "cifar10-0123",
    "target": {"workspace": WORKSPACE},
}


def test_a_stored_record_reads_typed_and_names_the_workspace_every_call_goes_to() -> None:
    info = AzureMLRunInfo.from_fields(STORED)
    assert info == AzureMLRunInfo(workspace=Workspace("0000-sub", "rg", "ws"))
    assert info.to_dict() == {"workspace": WORKSPACE}  # the key launch has written
    records = MemoryRecords()
    records.add("cifar10-0123-t1", "azureml", "cifar10", "pending", STORED)
    assert AzureMLBackend(records=records)._workspace_of("cifar10-0123-t1") == WORKSPACE


def test_a_record_without_its_workspace_reads_and_asks_the_environments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_SUBSCRIPTION_ID", "env-sub")
    monkeypatch.setenv("AZURE_RESOURCE_GROUP", "env-rg")
    monkeypatch.setenv("AZUREML_WORKSPACE_NAME", "env-ws")
    records = MemoryRecords()
    records.add("old-run", "azureml", "old", "pending", {"step_key": "old-0123"})
    assert AzureMLRunInfo.from_fields({}).workspace is None
    assert AzureMLBackend(records=records)._workspace_of("old-run")["name"] == "env-ws"
