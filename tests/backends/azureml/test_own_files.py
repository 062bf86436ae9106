"""``checkpoint.files`` on the Azure ML rig: a tutorial script that saves ``snapshot.pt`` in its working folder (the
node's code copy) resumes on a resubmit, its file kept in the ``checkpoints`` output (mounted read-write)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cloudddp.backends.azureml import AzureMLBackend
from cloudddp.backends.plugins import spec_from_dict
from tests.support.azure_launchers import Datastores, launch_pytorch
from tests.support.own_saver import saved_epochs, saver_code

pytestmark = pytest.mark.slow


def keeper_job(code: Path, token: str) -> dict[str, Any]:
    spec = spec_from_dict(
        {
            "name": "keeper",
            "code": {"dir": str(code), "entry": "train.py", "args": ["2", "--atomic"]},  # renamed over its link
            "checkpoint": {"files": ["snapshot.pt"]},
            "resources": {"nodes": 2, "gpus_per_node": 0},
            "azureml": {"compute": "cpu-cluster", "vm_size": "Standard_D4s_v3"},
        },
        base_dir=code,
    )
    job: dict[str, Any] = AzureMLBackend(token=token).render(spec).request["job"]
    return job


def test_an_own_scripts_declared_snapshot_resumes_on_a_resubmit(tmp_path: Path) -> None:
    code, stores = saver_code(tmp_path), Datastores(tmp_path / "blob")
    first = launch_pytorch(keeper_job(code, "first"), tmp_path / "first", stores)
    assert first.ok, first.describe()
    assert saved_epochs(first.logs[0]) == [0, 1] and "Resuming" not in first.logs[0], first.describe()
    assert (first.outputs["checkpoints"] / "files" / "snapshot.pt").is_file(), first.describe()
    second = launch_pytorch(keeper_job(code, "second"), tmp_path / "second", stores)
    assert second.ok, second.describe()
    assert second.outputs["checkpoints"] == first.outputs["checkpoints"]
    for rank in (0, 1):  # every node's code copy sees the kept file
        assert "Resuming training from snapshot at Epoch 2" in second.logs[rank], second.describe()
    assert saved_epochs(second.logs[0]) == [2, 3], second.describe()
