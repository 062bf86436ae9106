"""A hang on the Azure ML rig: the job the offline workspace received (tests/support/azure_rig.py) run for real
under Azure ML's PyTorch distribution (tests/support/azure_nodes.py), 2 nodes × 1 process, each process's output
uploaded to its own log file in the artifact store. Rank 1 sleeps in the middle of an epoch while rank 0 waits in
DDP's all-reduce; the hang doctor inside the ranks prints its verdict before rank 0 exits, the job fails as Azure ML
fails a script that exits non-zero (``ExecutionFailed``), and ``status`` (the API and the command, another process)
ends with cause ``hang`` naming rank 1, its node and its line, the stacks in its details."""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudddp.api import Run
from cloudddp.backends.status import Cause
from tests.backends.azureml.test_recovery import rig, submitted
from tests.support.azure_launchers import Datastores
from tests.support.azure_nodes import AzureNodes
from tests.support.azure_rig import WorkspaceModel
from tests.support.cli import cli
from tests.support.hang_script import TIMEOUT_S, assert_rank_1_named, script
from tests.support.harnesses import AzureMLHarness

pytestmark = pytest.mark.slow
__all__ = ["rig"]  # the workspace over HTTP, shared with the recovery tests


def hang_job(root: Path) -> Path:
    """The script on 2 nodes of the rig's cluster; not recovered (a hang is recoverable: the test's one attempt)."""
    (root / "code").mkdir(parents=True)
    (root / "code" / "train.py").write_text(script())
    overrides = dict(o.split("=", 1) for o in AzureMLHarness.overrides)
    spec: dict[str, Any] = {
        "name": "azure-hang",
        "code": {"dir": str(root / "code"), "entry": "train.py"},
        "resources": {"nodes": 2, "gpus_per_node": 0, "processes_per_node": 1},
        "distribution": {"collective_timeout": f"{TIMEOUT_S}s"},
        "checkpoint": {"enabled": False},
        "limits": {"max_recoveries": 0, "max_runtime": "10m"},
        "env": {"OMP_NUM_THREADS": "1"},
        "azureml": {key.removeprefix("azureml."): value for key, value in overrides.items()},
    }
    path = root / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.timeout(300)
def test_a_rank_asleep_on_the_second_node_is_named_with_its_line_in_status(rig: WorkspaceModel, tmp_path: Path) -> None:
    first = submitted(hang_job(tmp_path))
    ended = AzureNodes(rig, first, tmp_path / "attempt1", Datastores(tmp_path / "blob")).finish(timeout=TIMEOUT_S + 90)
    print(f"\nhang 2x1 on the Azure rig: exit codes {ended.returncodes}")
    assert ended.returncodes[0] not in (0, None) and "rank 1 sleeps" in ended.logs[1], ended.describe()

    status = Run.attach(first).status()
    assert status.cause is Cause.HANG, (status, ended.describe())
    named = f"hang: rank 1 on node 1 ({socket.gethostname()}): "
    failure = assert_rank_1_named(status, named)
    assert failure["culprit_node"] == "1", failure
    assert "ExecutionFailed" in failure["message"], failure  # the run history's error, kept beside the verdict
    shown = cli("status", first)  # what a person sees, from the verdict kept in the run's record
    assert named in shown.stdout and re.search(r"cause\s+hang", shown.stdout), shown.stdout
