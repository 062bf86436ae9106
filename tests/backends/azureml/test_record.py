"""The Azure ML run record: what launch keeps in a run's info reads back typed from among the other owners' keys,
as a record on disk holds them."""

from __future__ import annotations

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
