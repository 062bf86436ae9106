"""The rendered Azure ML command job, run the way Azure ML runs it: the shared script on CPU (gloo) under
Azure's PyTorch distribution (processes started directly with the torch.distributed variables) and under
its MPI distribution (a real Open MPI ``mpirun``), with inputs and outputs mounted as Azure ML would.

Everything the tests look at comes from the rendered document: the command, its variables, the
distribution, and the folders that ``inputs.*``/``outputs.*`` stand for; not the names of the variables
the backend uses to pass them (see tests/support/azure_launchers.py for what is emulated and how).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cloudddp.backends.azureml import AzureMLBackend
from cloudddp.specload import spec_from_dict

from ..conftest import ROOT
from ..support.azure_launchers import AzureRun, Datastores, launch_mpi, launch_pytorch, mpirun_unavailable, substitute

pytestmark = pytest.mark.slow

DIGITS_SAMPLES = 1000  # a subset, so the step count proves the script read the mounted input, not sklearn's copy
BATCH = 64  # the script's default per-process batch


def cpu_job(distribution: str, epochs: int, token: str) -> dict[str, Any]:
    """A CPU take on jobs/cifar10-azureml.yaml: 2 nodes of Standard_D4s_v3, digits from a datastore.
    ``distribution`` is Azure's (pytorch, mpi); the spec's launcher torchrun renders as pytorch."""
    spec = spec_from_dict({
        "name": "digits-azureml-cpu",
        "code": {"dir": "../src_train", "entry": "train.py",
                 "args": ["--dataset", "digits", "--model", "cnn", "--epochs", str(epochs)]},
        "inputs": {"digits": {"path": "azureml://datastores/workspaceblobstore/paths/digits/", "arg": "--data-dir"}},
        "resources": {"nodes": 2, "gpus_per_node": 0},
        "distribution": {"launcher": "mpi" if distribution == "mpi" else "torchrun"},
        "azureml": {"compute": "cpu-cluster", "vm_size": "Standard_D4s_v3"},
    }, base_dir=ROOT / "jobs")
    job: dict[str, Any] = AzureMLBackend(token=token).render(spec).request["job"]
    return job


@pytest.fixture
def stores(tmp_path: Path) -> Datastores:
    """The workspace's blob datastore, holding the digits input the job names."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    stores = Datastores(tmp_path / "blob")
    folder = stores.folder("azureml://datastores/workspaceblobstore/paths/digits/")
    folder.mkdir(parents=True)
    np.savez(folder / "digits.npz", images=digits.images[:DIGITS_SAMPLES], labels=digits.target[:DIGITS_SAMPLES])
    return stores


def steps_per_epoch(world: int) -> int:
    return int(0.8 * DIGITS_SAMPLES) // (BATCH * world)


def check_trains_checkpoints_and_resumes(launch: Callable[..., AzureRun], distribution: str, stores: Datastores,
                                         tmp_path: Path) -> None:
    first_job = cpu_job(distribution, epochs=2, token="first")
    assert first_job["distribution"] == {"type": distribution, "process_count_per_instance": 1}
    assert first_job["resources"]["instance_count"] == 2
    first = launch(first_job, tmp_path / "first", stores)
    assert first.ok, first.describe()
    world = len(first.returncodes)
    assert world == 2
    metrics = first.metrics(rank=0)
    assert [m.epoch for m in metrics if "test_acc" in m.values] == [1, 2], first.describe()
    assert next(m.step for m in metrics if m.epoch == 1) == steps_per_epoch(world)  # read the mounted digits.npz
    assert "test_acc" in metrics[-1].values
    assert not first.metrics(rank=1), "only rank 0 reports metrics"
    checkpoints = first.outputs["checkpoints"]
    assert (checkpoints / "ckpt-e0002-s0000000.pt").is_file(), sorted(p.name for p in checkpoints.iterdir())
    assert (checkpoints / "ckpt-e0002-s0000000.pt.sha256").is_file()
    assert (first.outputs["model"] / "model.pt").is_file(), first.describe()

    # Resubmitted with more epochs: a new job name (so a new model folder), the same checkpoint folder.
    second_job = cpu_job(distribution, epochs=3, token="second")
    assert second_job["name"] != first_job["name"]
    second = launch(second_job, tmp_path / "second", stores)
    assert second.ok, second.describe()
    assert second.outputs["checkpoints"] == checkpoints
    assert second.outputs["model"] != first.outputs["model"]
    assert "resumed from" in second.logs[0] and "ckpt-e0002-s0000000.pt" in second.logs[0], second.describe()
    assert {m.epoch for m in second.metrics(rank=0)} == {3}, "trains only the epoch left"
    assert (checkpoints / "ckpt-e0003-s0000000.pt").is_file()
    assert (second.outputs["model"] / "model.pt").is_file()


def test_pytorch_distribution_trains_checkpoints_and_resumes(stores: Datastores, tmp_path: Path) -> None:
    check_trains_checkpoints_and_resumes(launch_pytorch, "pytorch", stores, tmp_path)


def test_mpi_distribution_under_real_mpirun_trains_checkpoints_and_resumes(stores: Datastores, tmp_path: Path) -> None:
    reason = mpirun_unavailable()
    if reason:
        pytest.skip(reason)
    job = cpu_job("mpi", epochs=2, token="probe")
    assert "torchrun" not in job["command"], "under MPI every rank runs the command itself"
    check_trains_checkpoints_and_resumes(launch_mpi, "mpi", stores, tmp_path)


def test_substitution_refuses_a_reference_the_job_does_not_define(tmp_path: Path) -> None:
    assert substitute("run ${{inputs.a}} ${{outputs.b}}", {"a": tmp_path / "in"}, {"b": tmp_path / "out"}) == \
        f"run {tmp_path / 'in'} {tmp_path / 'out'}"
    with pytest.raises(KeyError, match="outputs.model"):
        substitute("python train.py --out ${{outputs.model}}", {}, {})
