"""The offline workspace (tests/support/azure_rig.py) for the Azure ML tests that drive the backend in this process."""

from __future__ import annotations

import pytest

from tests.support.azure_rig import WorkspaceModel, create_container


@pytest.fixture()
def model(blob_endpoint: str) -> WorkspaceModel:
    """A workspace with its artifact store's container made on Azurite."""
    m = WorkspaceModel(blob_endpoint)
    create_container(m)
    return m
