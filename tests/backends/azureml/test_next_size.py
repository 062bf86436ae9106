"""``limits.recover_to: next_size`` on Azure ML, as the detached watcher runs it against the offline workspace
served over HTTP: after a capacity failure, a wait ``Queued`` past ``limits.queue_timeout`` (the queued job cancelled
first) or a refusal for quota at submission, the next attempt is the plan rendered at submit for the next size of the
ranking, on serverless compute (a new instance type in the job) and on ``azureml.compute: auto`` (a new
cluster named after the new size, so no cluster of another size is ever asked to run it). Nothing of cloudddp is
stubbed; the jobs' states are set in the rig, as Azure ML would report them."""

from __future__ import annotations

import datetime
import time
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
from tests.support.azure_rig import (
    QUOTA_REFUSED,
    RG,
    SUB,
    WS,
    WorkspaceModel,
    create_container,
    serve,
    served_environment,
)
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


def gpu_job(tmp_path: Path, name: str, azureml: dict[str, Any], **limits: Any) -> Path:
    spec = {
        "name": name,
        "code": {"dir": str(ROOT / "src_train"), "entry": "train.py", "args": ["--dataset", "digits"]},
        "resources": {"nodes": 1, "gpus_per_node": 1},
        "limits": {
            "max_recoveries": 2,
            "max_runtime": "1h",
            "recover_to": "next_size",
            "capacity_tries": 1,
            **limits,
        },
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


def submitted(path: Path, *options: str) -> tuple[Run, list[str]]:
    """The run of ``path`` submitted detached to Azure ML with recovery, and the ranking of its next sizes."""
    spec = load_spec(path)
    _, ranking = ranked_sizes(get_backend("azureml").size_target(spec), spec)
    result = cli("submit", str(path), "-b", "azureml", "--detach", "--quiet", "-y", *options)
    assert result.returncode == 0, result.stderr
    return Run.attach(result.stdout.strip()), ranking


def moved_after_a_capacity_failure(rig: WorkspaceModel, path: Path) -> tuple[Run, str, str]:
    """Submit with recovery, fail the first job for capacity; the run, the next size and the second job's name."""
    run, ranking = submitted(path)
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


def when(stamp: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(stamp)


@pytest.mark.timeout(240)
def test_a_queued_serverless_job_is_cancelled_after_its_queue_time_and_moves_to_the_next_size(
    rig: WorkspaceModel, tmp_path: Path
) -> None:
    """Azure ML keeps a job Queued while quota is in use or nodes cannot be had, and never fails it: after
    ``limits.queue_timeout`` the watcher cancels it, waits until it is Canceled, then submits the next size."""
    path = gpu_job(tmp_path, "queued-serverless", {}, queue_timeout=3, capacity_tries=2)
    run, ranking = submitted(path)
    first = run.run_id
    rig.held_cancels.add(first)  # its cancel lasts until released: the next size must wait for it
    assert rig.jobs[first]["properties"]["status"] in ("NotStarted", "Preparing", "Queued")  # nothing fails it
    wait_until(lambda: rig.cancel_requests.get(first), timeout=60)
    time.sleep(2)  # several polls of the watcher
    assert list(rig.jobs) == [first] and rig.jobs[first]["properties"]["status"] == "CancelRequested"
    rig.held_cancels.discard(first)
    second = wait_until(lambda: len(run.chain.attempts) == 2 and run.chain.current, timeout=90)  # type: ignore[union-attr]
    assert second.size == ranking[0] and rig.jobs[first]["properties"]["status"] == "Canceled"
    assert rig.cancel_requests[first] == 1
    cancelled, created = rig.run_times[first]["endTimeUtc"], rig.jobs[second.run_id]["systemData"]["createdAt"]
    assert when(cancelled) <= when(created), "the next size is sent only once the queued job has ended"
    message = run.chain.message  # type: ignore[union-attr]
    assert f"on {ranking[0]} after a wait in the queue on {FIRST}" in message, message
    assert "longer than limits.queue_timeout (3s): cancelled" in message, message
    assert rig.jobs[second.run_id]["properties"]["resources"]["instanceType"] == ranking[0]
    completes(rig, run, second.run_id, [FIRST, ranking[0]])


@pytest.mark.timeout(240)
def test_a_serverless_job_refused_at_submission_for_quota_moves_to_the_next_size_at_once(
    rig: WorkspaceModel, tmp_path: Path
) -> None:
    """A serverless job whose VM family has too little quota is refused by Azure ML at submission: the next size of
    the ranking is submitted at once (the checks skipped here, so the refusal is the service's own)."""
    rig.set_usage("Standard NCADSA100v4 Family Cluster Dedicated vCPUs", limit=0)
    path = gpu_job(tmp_path, "refused-serverless", {})
    run, ranking = submitted(path, "--skip-checks")
    assert list(rig.jobs) == [run.run_id], "the refused size was never created"
    assert rig.jobs[run.run_id]["properties"]["resources"]["instanceType"] == ranking[0]
    attempt = run.chain.current  # type: ignore[union-attr]
    assert attempt.number == 1 and attempt.size == ranking[0]
    assert f"refused at submission: {FIRST} (Azure ML refused the job for quota on {FIRST}" in attempt.note
    assert QUOTA_REFUSED in attempt.note, attempt.note
    completes_at_once(rig, run, [ranking[0]])


def completes_at_once(rig: WorkspaceModel, run: Run, sizes: list[str]) -> None:
    rig.set_job_status(run.run_id, "Completed")
    status = wait_until(lambda: (s := run.status()).state.terminal and s, timeout=60)
    assert status.state is RunState.SUCCEEDED, status
    assert [a["size"] for a in status.details["attempts"]] == sizes


def test_without_a_size_to_move_to_a_refusal_for_quota_exits_2_saying_so(rig: WorkspaceModel, tmp_path: Path) -> None:
    rig.set_usage("Standard NCADSA100v4 Family Cluster Dedicated vCPUs", limit=0)
    path = gpu_job(tmp_path, "refused-here", {}, recover_to="same_size")
    result = cli("submit", str(path), "-b", "azureml", "--detach", "--quiet", "-y", "--skip-checks")
    assert result.returncode == 2, result.stderr
    assert f"Azure ML refused the job for quota on {FIRST}" in result.stderr and QUOTA_REFUSED in result.stderr
    assert "Traceback" not in result.stderr and not rig.jobs
