"""The SageMaker run record: what launch keeps in a run's info reads back typed from among the other owners' keys,
as a record on disk holds them."""

from __future__ import annotations

import pytest

from cloudddp.backends.records import MemoryRecords
from cloudddp.backends.sagemaker import SageMakerBackend
from cloudddp.backends.sagemaker.record import SageMakerRunInfo

STORED = {  # a run's info as the run database holds it, written literally: the backend's keys, the base class's beside
    "region": "eu-west-1",
    "uploaded_bytes": [2048, 0],
    "estimate": None,
    "step_key": "cifar10-0123",
    "target": {"region": "eu-west-1"},
}


def test_a_stored_record_reads_typed_and_names_the_region_every_call_goes_to() -> None:
    info = SageMakerRunInfo.from_fields(STORED)
    assert info == SageMakerRunInfo(region="eu-west-1", uploaded_bytes=(2048, 0))
    assert info.to_dict() == {"region": "eu-west-1", "uploaded_bytes": [2048, 0]}  # the keys launch has written
    records = MemoryRecords()
    records.add("cifar10-0123-t1", "sagemaker", "cifar10", "pending", STORED)
    assert SageMakerBackend(records=records)._region_of("cifar10-0123-t1") == "eu-west-1"


def test_a_record_without_its_region_reads_and_asks_the_environments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    records = MemoryRecords()
    records.add("old-run", "sagemaker", "old", "pending", {"step_key": "old-0123"})
    assert SageMakerRunInfo.from_fields({}).region is None
    assert SageMakerBackend(records=records)._region_of("old-run") == "ap-south-1"
