"""``limits.recover_to: next_size`` on Azure ML, as the detached watcher runs it against the offline workspace
served over HTTP: after a capacity failure the next attempt is the plan rendered at submit for the next size of
the ranking, on serverless compute (a new instance type in the job) and on ``azureml.compute: auto`` (a new
cluster named after the new size, so no cluster of another size is ever asked to run it). Nothing of cloudddp is
stubbed; the jobs' states are set in the rig, as Azure ML would report them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudddp.api import Run
from cloudddp.backends.azureml.decide import workspace_tag
from cloudddp.backends.plugins import load_spec
from cloudddp.backends.status import RunState
from cloudddp.catalog.ranking import ranked_sizes
from cloudddp.runs.runner import get_backend
from tests.support.azure_rig import RG, SUB, WS, WorkspaceModel, create_container, serve, served_environment
from tests.support.cli import ROOT, cli
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow
FIRST = "Standard_NC24ads_A100_v4"
CAPACITY = "AllocationFailed: Azure could not allocate Standard_NC24ads_A100_v4 nodes in eastus; try another size"


@pytest.fixture()
def rig(blob_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkspaceModel]:
    model = WorkspaceModel(blob_endpoint)
    create_container(model)
    model.set_usage("Standard NCADSA100v4 Family Cluster Dedicated vCPUs", limit=96)  # the first size has quota
    model.set_usage("Standard NCASv3_T4 Family Cluster Dedicated vCPUs", limit=8)  # and the next one
    with serve(model) as url:
        for key, value in {**served_environment(url, model), "CLOUDDDP_RECOVERY_POLL": "0.3"}.items():
            monkeypatch.setenv(key, value)
        yield model


def gpu_job(tmp_path: Path, name: str, azureml: dict[str, Any]) -> Path:
    spec = {
        "name": name,
        "code": {"dir": str(ROOT / "src_train"), "entry": "train.py", "args": ["--dataset", "digits"]},
        "resources": {"nodes": 1, "gpus_per_node": 1},
        "limits": {"max_recoveries": 2, "max_runtime": "1h", "recover_to": "next_size", "capacity_tries": 1},
        "azureml": {
            "subscription_id": "00000000-0000-0000-0000-000000000000",
            "resource_group": "ml-rg",
            "workspace": "ml-workspace",
            "vm_size": FIRST,
            **azureml,
        },
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def moved_after_a_capacity_failure(rig: WorkspaceModel, path: Path) -> tuple[Run, str, str]:
    """Submit with recovery, fail the first job for capacity; the run, the next size and the second job's name."""
    spec = load_spec(path)
    _, ranking = ranked_sizes(get_backend("azureml").size_target(spec), spec)
    result = cli("submit", str(path), "-b", "azureml", "--detach", "--quiet", "-y")
    assert result.returncode == 0, result.stderr
    run = Run.attach(result.stdout.strip())
    first = run.run_id
    rig.fail_job(first, CAPACITY)
    second = wait_until(lambda: len(run.chain.attempts) == 2 and run.chain.current, timeout=90)  # type: ignore[union-attr]
    assert second.size == ranking[0], (second.size, ranking)
    assert f"on {ranking[0]} after 1 capacity failure on {FIRST}" in run.chain.message  # type: ignore[union-attr]
    return run, ranking[0], second.run_id


def completes(rig: WorkspaceModel, run: Run, second: str, sizes: list[str]) -> None:
    rig.set_job_status(second, "Completed")
    status = wait_until(lambda: (s := run.status()).state.terminal and s, timeout=60)
    assert status.state is RunState.SUCCEEDED, status
    assert [a["size"] for a in status.details["attempts"]] == sizes
    assert [a["cause"] for a in status.details["attempts"]] == ["capacity", None]


@pytest.mark.timeout(240)
def test_a_serverless_recovery_moves_to_the_next_instance_type_after_a_capacity_failure(
    rig: WorkspaceModel, tmp_path: Path
) -> None:
    run, nxt, second = moved_after_a_capacity_failure(rig, gpu_job(tmp_path, "next-serverless", {}))
    first = rig.jobs[run.run_id]["properties"]
    again = rig.jobs[second]["properties"]
    assert first["resources"]["instanceType"] == FIRST and again["resources"]["instanceType"] == nxt
    assert not again.get("computeId") and not rig.computes  # serverless both times: no cluster made
    completes(rig, run, second, [FIRST, nxt])


@pytest.mark.timeout(240)
def test_an_auto_cluster_recovery_moves_to_a_cluster_of_the_next_size_after_a_capacity_failure(
    rig: WorkspaceModel, tmp_path: Path
) -> None:
    run, nxt, second = moved_after_a_capacity_failure(rig, gpu_job(tmp_path, "next-cluster", {"compute": "auto"}))
    sizes = {name: c["properties"]["properties"]["vmSize"] for name, c in rig.computes.items()}
    tag = f"cdp{workspace_tag({'subscription_id': SUB, 'resource_group': RG, 'name': WS})}"  # the rig's own
    cluster = f"{tag}-{nxt.removeprefix('Standard_').replace('_', '').lower()}-d"  # the next size's own cluster
    assert sizes == {f"{tag}-nc24adsa100v4-d": FIRST, cluster: nxt}, sizes
    assert rig.jobs[second]["properties"]["computeId"].endswith(f"/computes/{cluster}")
    completes(rig, run, second, [FIRST, nxt])
