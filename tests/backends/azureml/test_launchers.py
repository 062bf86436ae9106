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
from cloudddp.backends.plugins import spec_from_dict
from tests.support.azure_launchers import (
    AzureRun,
    Datastores,
    launch_mpi,
    launch_pytorch,
    mpirun_unavailable,
    substitute,
)
from tests.support.cli import ROOT
from tests.support.rigs import rig_unavailable

pytestmark = pytest.mark.slow

DIGITS_SAMPLES = 1000  # a subset, so the step count proves the script read the mounted input, not sklearn's copy
BATCH = 64  # the script's default per-process batch


def cpu_job(distribution: str, epochs: int, token: str, checkpoints: str | None = None) -> dict[str, Any]:
    """A CPU take on jobs/cifar10-azureml.yaml: 2 nodes of Standard_D4s_v3, digits from a datastore.
    ``distribution`` is Azure's (pytorch, mpi); the spec's launcher torchrun renders as pytorch."""
    spec = spec_from_dict(
        {
            **({"checkpoint": {"path": checkpoints}} if checkpoints else {}),
            "name": "digits-azureml-cpu",
            "code": {
                "dir": "../src_train",
                "entry": "train.py",
                "args": ["--dataset", "digits", "--model", "cnn", "--epochs", str(epochs)],
            },
            "inputs": {
                "digits": {"path": "azureml://datastores/workspaceblobstore/paths/digits/", "arg": "--data-dir"}
            },
            "resources": {"nodes": 2, "gpus_per_node": 0},
            "distribution": {"launcher": "mpi" if distribution == "mpi" else "torchrun"},
            "azureml": {"compute": "cpu-cluster", "vm_size": "Standard_D4s_v3"},
        },
        base_dir=ROOT / "jobs",
    )
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


def check_trains_checkpoints_and_resumes(
    launch: Callable[..., AzureRun], distribution: str, stores: Datastores, tmp_path: Path
) -> None:
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

    # Continued for one more epoch: a variant (another --epochs) gets a checkpoint folder of its own, so it
    # names the first one's; a new job name, so a new model folder.
    second_job = cpu_job(
        distribution, epochs=3, token="second", checkpoints=first_job["outputs"]["checkpoints"]["path"]
    )
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
        rig_unavailable(reason)
    job = cpu_job("mpi", epochs=2, token="probe")
    assert "torchrun" not in job["command"], "under MPI every rank runs the command itself"
    check_trains_checkpoints_and_resumes(launch_mpi, "mpi", stores, tmp_path)


def test_substitution_refuses_a_reference_the_job_does_not_define(tmp_path: Path) -> None:
    assert (
        substitute("run ${{inputs.a}} ${{outputs.b}}", {"a": tmp_path / "in"}, {"b": tmp_path / "out"})
        == f"run {tmp_path / 'in'} {tmp_path / 'out'}"
    )
    with pytest.raises(KeyError, match=r"outputs\.model"):
        substitute("python train.py --out ${{outputs.model}}", {}, {})


def bash_job(tmp_path: Path, distribution: str, command: str) -> dict[str, Any]:
    """A hand-written two-node command job that runs only bash (seconds less than the training script)."""
    code = tmp_path / "code"
    code.mkdir()
    return {
        "name": "probe-job",
        "code": str(code),
        "command": command,
        "environment_variables": {"FROM_JOB": "yes"},
        "distribution": {"type": distribution, "process_count_per_instance": 1},
        "resources": {"instance_count": 2},
        "outputs": {"model": {"type": "uri_folder", "mode": "rw_mount"}},
    }


def test_pytorch_launcher_sets_the_documented_variables_and_a_failed_process_fails_the_job(tmp_path: Path) -> None:
    names = "MASTER_ADDR MASTER_PORT WORLD_SIZE NODE_RANK RANK LOCAL_RANK FROM_JOB"
    command = (
        "for v in " + names + '; do echo "$v=${!v}"; done; echo "out=${{outputs.model}}"; '
        # rank 1 fails once rank 0 has printed (the nodes share the output folder): on a loaded machine rank 0 may
        # start seconds later, and the failure stops it
        'mark="${{outputs.model}}/rank-0-printed"; [ "$RANK" = 0 ] && touch "$mark"; '
        '[ "$RANK" = 1 ] && { for _ in $(seq 1200); do [ -e "$mark" ] && break; sleep 0.1; done; exit 3; }; sleep 60'
    )
    run = launch_pytorch(bash_job(tmp_path, "pytorch", command), tmp_path / "run", Datastores(tmp_path / "blob"))
    assert run.returncodes == {0: -9, 1: 3}, run.describe()  # rank 1 failed, so rank 0 was stopped
    seen = [dict(line.split("=", 1) for line in run.logs[rank].splitlines() if "=" in line) for rank in (0, 1)]
    assert [(s["NODE_RANK"], s["RANK"], s["LOCAL_RANK"], s["WORLD_SIZE"]) for s in seen] == [
        ("0", "0", "0", "2"),
        ("1", "1", "0", "2"),
    ]
    assert seen[0]["MASTER_ADDR"] == seen[1]["MASTER_ADDR"] and seen[0]["MASTER_PORT"] == seen[1]["MASTER_PORT"]
    assert seen[0]["FROM_JOB"] == "yes"
    assert seen[0]["out"] == str(tmp_path / "blob" / "workspaceblobstore" / "azureml" / "probe-job" / "model")


def test_mpirun_gives_every_rank_the_open_mpi_variables(tmp_path: Path) -> None:
    reason = mpirun_unavailable()
    if reason:
        rig_unavailable(reason)
    command = (
        "echo rank=$OMPI_COMM_WORLD_RANK size=$OMPI_COMM_WORLD_SIZE local=$OMPI_COMM_WORLD_LOCAL_RANK "
        "master=$AZ_BATCHAI_MPI_MASTER_NODE from_job=$FROM_JOB"
    )
    run = launch_mpi(bash_job(tmp_path, "mpi", command), tmp_path / "run", Datastores(tmp_path / "blob"))
    assert run.ok, run.describe()
    assert [run.logs[rank].strip() for rank in (0, 1)] == [
        "rank=0 size=2 local=0 master=127.0.0.1 from_job=yes",
        "rank=1 size=2 local=1 master=127.0.0.1 from_job=yes",
    ]
    files = sorted(p.name for p in (tmp_path / "run" / "user_logs").iterdir())  # named as the runtime names them
    assert files == ["std_log_process_00.txt", "std_log_process_01.txt"]
    assert (tmp_path / "run" / "user_logs" / files[1]).read_text().startswith("rank=1 ")


@pytest.mark.parametrize("mode", ["download", "ro_mount"])
def test_a_uri_file_input_is_the_files_own_path_in_the_job(tmp_path: Path, mode: str) -> None:
    """What cloudddp renders for a file input, run the way Azure ML runs it: the command gets the file."""
    data = tmp_path / "labels.csv"
    data.write_text("a,b\n1,2\n")
    spec = spec_from_dict(
        {
            "name": "file-input",
            "code": {"dir": str(ROOT / "src_train")},
            "inputs": {"labels": {"path": str(data), "mode": "mount" if mode == "ro_mount" else "download"}},
            "resources": {"nodes": 1, "gpus_per_node": 0},
            "azureml": {"compute": "cpu-cluster", "vm_size": "Standard_D4s_v3"},
        },
        base_dir=tmp_path,
    )
    rendered = AzureMLBackend(token="f").render(spec).request["job"]
    assert rendered["inputs"]["labels"] == {"type": "uri_file", "path": str(data), "mode": mode}
    job = {
        **bash_job(tmp_path, "pytorch", "head -1 ${{inputs.labels}}; echo is=${{inputs.labels}}"),
        "inputs": rendered["inputs"],
    }
    job["resources"] = {"instance_count": 1}
    run = launch_pytorch(job, tmp_path / "run", Datastores(tmp_path / "blob"))
    assert run.ok, run.describe()
    assert run.logs[0].splitlines()[0] == "a,b"
    assert run.logs[0].splitlines()[1].endswith("/labels.csv")


ENV_SCRIPT = """
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # env://, as a tutorial script does: RANK, WORLD_SIZE, MASTER_ADDR/PORT
total = torch.tensor([float(dist.get_rank())])
dist.all_reduce(total)
print(f"rank {dist.get_rank()} of {dist.get_world_size()}, local {os.environ['LOCAL_RANK']} of "
      f"{os.environ['LOCAL_WORLD_SIZE']}, sum {total.item():.0f}", flush=True)
dist.destroy_process_group()
"""


def test_an_own_script_using_env_init_runs_under_the_mpi_distribution(stores: Datastores, tmp_path: Path) -> None:
    reason = mpirun_unavailable()
    if reason:
        rig_unavailable(reason)
    code = tmp_path / "own"
    code.mkdir()
    (code / "train.py").write_text(ENV_SCRIPT)
    spec = spec_from_dict(
        {
            "name": "own-mpi",
            "code": {"dir": str(code), "entry": "train.py"},
            "resources": {"nodes": 2, "gpus_per_node": 0},  # one process per CPU node
            "distribution": {"launcher": "mpi"},
            "azureml": {"compute": "cpu-cluster", "vm_size": "Standard_D4s_v3"},
        },
        base_dir=tmp_path,
    )
    job: dict[str, Any] = AzureMLBackend(token="own").render(spec).request["job"]
    assert "_cloudddp_launch.py" in job["command"], "under mpirun the launcher sets the torch.distributed variables"
    run = launch_mpi(job, tmp_path / "run", stores)
    assert run.ok, run.describe()
    # The rig's one mpirun runs both "nodes" on this host, so Open MPI counts them as local to each other.
    assert "rank 0 of 2, local 0 of 2, sum 1" in run.logs[0], run.describe()
    assert "rank 1 of 2, local 1 of 2, sum 1" in run.logs[1], run.describe()


def test_the_launcher_derives_the_torch_variables_from_open_mpis_and_keeps_what_is_set() -> None:
    from cloudddp.injob.mpi_env import MPI_PORT, mpi_environment

    ompi = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}
    derived = mpi_environment({**ompi, "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "AZ_BATCHAI_MPI_MASTER_NODE": "10.0.0.4"})
    assert derived == {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "10.0.0.4",
        "MASTER_PORT": MPI_PORT,
    }
    assert mpi_environment({**ompi, "MASTER_PORT": "7000"}).get("MASTER_PORT") is None  # set: kept
    assert mpi_environment({"RANK": "0"}) == {}  # not under MPI: nothing


def test_on_several_nodes_the_head_node_and_port_azure_names_win() -> None:
    from cloudddp.injob.mpi_env import mpi_environment

    ompi = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    both = {**ompi, "AZ_BATCH_MASTER_NODE": "10.0.0.5:6105", "AZ_BATCHAI_MPI_MASTER_NODE": "10.0.0.4"}
    derived = mpi_environment(both)
    assert (derived["MASTER_ADDR"], derived["MASTER_PORT"]) == ("10.0.0.5", "6105")
    assert mpi_environment(ompi)["MASTER_ADDR"] == "127.0.0.1"  # none named: this machine, as before
