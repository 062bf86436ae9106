"""``-b auto``, ``limits.recover_to: any_backend`` and ``submit --resume-from`` across the rigs: the AWS emulator
(moto) with AWS's training toolkit, the Azure ML workspace served to the real azure-ai-ml SDK with its blobs on
Azurite, and the test Slurm cluster. The CLI and the detached recovery watcher are real processes; nothing of
cloudddp is stubbed. A run that moves carries its checkpoint from one backend's storage to the next one's."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudddp.api import Job, Run
from cloudddp.backends.status import RunState
from cloudddp.runs.runner import get_backend
from tests.support.aws_emulator import sagemaker_quotas, set_status, use_emulator
from tests.support.azure_launchers import Datastores
from tests.support.azure_nodes import AzureNodes
from tests.support.azure_rig import WorkspaceModel, served_to_processes
from tests.support.cli import ROOT, cli
from tests.support.harnesses import AzureMLHarness, SageMakerHarness, SlurmHarness
from tests.support.mlflow_server import MlflowServer
from tests.support.slurm_cluster import SlurmCluster
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow
CAPACITY = (
    "CapacityError: Unable to provision requested ML compute capacity. Please retry using a different ML instance type."
)


@pytest.fixture()
def azure(blob_endpoint: str, mlflow_server: MlflowServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkspaceModel]:
    with served_to_processes(blob_endpoint, mlflow_server, monkeypatch) as model:
        yield model


@pytest.fixture()
def aws(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    return use_emulator(monkeypatch, moto_url)


def sections(*harnesses: Any) -> dict[str, dict[str, str]]:
    """The backends' spec sections the harnesses' overrides give (``sagemaker.region=...``)."""
    out: dict[str, dict[str, str]] = {}
    for harness in harnesses:
        for override in harness.overrides:
            key, value = override.split("=", 1)
            section, name = key.split(".", 1)
            out.setdefault(section, {})[name] = value
    return out


def digits_job(tmp_path: Path, name: str, args: list[str], backends: list[str], **extra: Any) -> Path:
    """The shared training script on digits, one CPU process, for ``backends`` (most preferred first)."""
    spec: dict[str, Any] = {
        "name": name,
        "code": {"dir": str(ROOT / "src_train"), "entry": "train.py", "args": args},
        "resources": {"nodes": 1, "gpus_per_node": 0, "processes_per_node": 1},
        "checkpoint": {"every_epochs": 1, "resume": "auto"},
        "backends": backends,
        **sections(SageMakerHarness, AzureMLHarness, SlurmHarness),
        **extra,
    }
    spec["limits"] = {"max_runtime": "10m", **spec.get("limits", {})}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.timeout(420)
def test_auto_places_the_job_on_sagemaker_first_and_moves_it_to_azure_ml_after_a_capacity_error(
    aws: str, azure: WorkspaceModel, tmp_path: Path
) -> None:
    job = digits_job(tmp_path, "digits-auto", ["--dataset", "digits", "--epochs", "2"], ["sagemaker", "azureml"])
    result = cli("submit", str(job), "-b", "auto", "--detach", "-y")
    assert result.returncode == 0, result.stderr
    ranking = result.stderr[result.stderr.index("placement (-b auto)") :]
    assert ranking.index("1. sagemaker") < ranking.index("2. azureml"), result.stderr
    assert "after a capacity failure it moves to azureml" in result.stderr, result.stderr
    run = Run.attach(submitted(result.stderr))
    first = run.run_id
    assert run.backend.name == "sagemaker"

    set_status(first, "Failed", "Failed", reason=CAPACITY)  # SageMaker could not get the instances
    chain = wait_until(lambda: (c := run.chain) is not None and len(c.attempts) == 2 and c, 120)
    second = chain.current
    assert (second.backend, second.number) == ("azureml", 2), chain
    assert f"moved from sagemaker after capacity ({CAPACITY})" in second.note, second.note
    assert second.run_id in azure.jobs

    finished = AzureNodes(azure, second.run_id, tmp_path / "azure", Datastores(tmp_path / "blob")).finish(120)
    assert finished.ok, finished.describe()
    status = run.wait(timeout=60, poll=0.5)
    assert status.state is RunState.SUCCEEDED, status
    assert [(a["backend"], a["state"], a["cause"]) for a in status.details["attempts"]] == [
        ("sagemaker", "failed", "capacity"),
        ("azureml", "succeeded", None),
    ]
    shown = cli("status", first)
    assert shown.returncode == 0, shown.stderr
    assert "moved from sagemaker after capacity" in shown.stdout and "azureml" in shown.stdout, shown.stdout
    assert "placed by -b auto (ranked sagemaker, azureml)" in shown.stdout, shown.stdout
    cost = cli("cost", first)
    assert cost.returncode == 0 and "(sagemaker, failed)" in cost.stdout, cost.stdout
    assert "(azureml, succeeded)" in cost.stdout, cost.stdout


@pytest.mark.timeout(180)
def test_auto_sets_a_backend_without_quota_aside_at_submit_and_says_why(
    aws: str, azure: WorkspaceModel, tmp_path: Path
) -> None:
    job = digits_job(tmp_path, "digits-quota", ["--dataset", "digits", "--epochs", "1"], ["sagemaker", "azureml"])
    with sagemaker_quotas({"ml.m5.xlarge for training job usage": 0}):  # the account may run none
        result = cli("submit", str(job), "-b", "auto", "--detach", "-y")
    assert result.returncode == 0, result.stderr
    assert "1. azureml" in result.stderr and "2. sagemaker: not used: quota" in result.stderr, result.stderr
    run = Run.attach(submitted(result.stderr))
    assert run.backend.name == "azureml" and run.run_id in azure.jobs
    assert run.cancel()


def submitted(said: str) -> str:
    """The run id ``submit`` names in its last line (``submitted RUN (backend)``)."""
    found = re.findall(r"^submitted (\S+) \(\w+\)$", said, re.MULTILINE)
    assert found, said
    return str(found[-1])


def train_losses(records: Any) -> list[int]:
    """The steps of the per-step records (``--log-every 1``), without the epochs' summaries (which give the epoch's
    throughput, at its last step)."""
    return [r.step for r in records if "train_loss" in r.values and "images_per_sec" not in r.values]


def evaluated(records: Any) -> list[int]:
    return [r.epoch for r in records if "test_acc" in r.values]


@pytest.mark.timeout(600)
def test_a_run_preempted_on_azure_ml_resumes_on_slurm_from_its_azure_checkpoint_each_step_once(
    azure: WorkspaceModel, cluster: SlurmCluster, tmp_path: Path
) -> None:
    args = ["--dataset", "digits", "--model", "cnn", "--epochs", "3", "--batch-size", "8", "--log-every", "1"]
    limits = {"max_recoveries": 1, "recover_to": "any_backend"}
    job = digits_job(tmp_path, "digits-move", args, ["azureml", "slurm"], limits=limits)
    result = cli("submit", str(job), "-b", "azureml", "--detach", "--quiet", "-y")
    assert result.returncode == 0, result.stderr
    first = result.stdout.strip()
    run = Run.attach(first)
    stores = Datastores(tmp_path / "blob")
    nodes = AzureNodes(azure, first, tmp_path / "attempt1", stores)
    try:  # once epoch 1 is checkpointed, Azure takes the nodes back; the script saves where it stopped
        wait_until(lambda: list(nodes.checkpoints.glob("ckpt-e0001-*.pt.sha256")), 180, poll=0.05)
        preempted = nodes.preempt()
    finally:
        nodes.stop()
    assert "stopping on SIGTERM" in preempted.logs[0], preempted.describe()

    chain = wait_until(lambda: (c := run.chain) is not None and len(c.attempts) == 2 and c, 180)
    second = chain.current
    assert second.backend == "slurm", chain
    assert "moved from azureml after preempted" in second.note and "carried" in second.note, second.note
    status = run.wait(timeout=300, poll=1)
    assert status.state is RunState.SUCCEEDED, (status, cli("logs", second.run_id).stdout[-3000:])

    slurm = get_backend("slurm")
    log = "\n".join(line.text for line in slurm.logs(second.run_id))
    assert "resumed from" in log, log[-3000:]
    before, after = train_losses(preempted.metrics()), train_losses(slurm.metrics(second.run_id))
    assert before and after and after[0] == before[-1] + 1, (before[-3:], after[:3])
    assert before + after == list(range(1, after[-1] + 1))  # every step exactly once across both backends
    assert evaluated(preempted.metrics()) + evaluated(slurm.metrics(second.run_id)) == [1, 2, 3]
    assert train_losses(run.metrics()) == before + after


@pytest.mark.timeout(420)
def test_submit_on_slurm_resumes_from_a_sagemaker_runs_checkpoint_in_s3(
    aws: str, cluster: SlurmCluster, tmp_path: Path
) -> None:
    import boto3

    from tests.support.sagemaker_container import Aws, record_create_training_job, rehearse

    data = digits_channel(tmp_path / "data")
    inputs = {"train": {"path": str(data), "arg": "--data-dir"}}
    job = digits_job(tmp_path, "digits-s3", ["--dataset", "digits", "--epochs", "2"], ["sagemaker"], inputs=inputs)
    session = boto3.session.Session(region_name="us-east-1")
    sent = record_create_training_job(session)
    first = Job.load(job).submit("sagemaker", session=session)
    (tmp_path / "container").mkdir()
    trained = rehearse(sent[0], tmp_path / "container", Aws(aws, "us-east-1"))  # AWS's toolkit runs it
    assert all(host.returncode == 0 for host in trained.hosts), trained.hosts[0].log[-3000:]
    set_status(first.run_id, "Completed", "Completed")

    longer = "code.args=[--dataset, digits, --epochs, '4']"
    result = cli("submit", str(job), "-b", "slurm", "--resume-from", first.run_id, "-o", longer, "--detach")
    assert result.returncode == 0, result.stderr
    assert f"carrying {first.run_id}'s latest checkpoint from sagemaker to slurm" in result.stderr, result.stderr
    run = Run.attach(submitted(result.stderr))
    status = run.wait(timeout=300, poll=1)
    assert status.state is RunState.SUCCEEDED, status
    log = "\n".join(line.text for line in run.logs())
    assert "resumed from" in log and "ckpt-e0002" in log, log[-3000:]
    epochs = sorted({r.epoch for r in run.metrics() if "test_acc" in r.values})
    assert epochs == [3, 4], epochs  # only the epochs after the SageMaker run's


def digits_channel(folder: Path) -> Path:
    """A ``train`` channel holding scikit-learn's digits as the shared script's digits.npz."""
    import numpy as np
    from sklearn.datasets import load_digits

    folder.mkdir(parents=True, exist_ok=True)
    bunch = load_digits()
    np.savez(folder / "digits.npz", images=bunch.images, labels=bunch.target)
    return folder
