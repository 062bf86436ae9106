"""Rehearsals: the request cloudddp sends to SageMaker (moto) runs in AWS's own container code here.

cloudddp launches the job against moto as usual; the CreateTrainingJob it sent is then run by the
SageMaker training toolkit (``sagemaker-training`` + ``sagemaker-pytorch-training``, the code inside
the PyTorch DLCs) on this machine, one namespace-isolated host per instance (tests/support/
sagemaker_container.py). Each test says what SageMaker's own code does with the request and what the
script must see there.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest

from cloudddp.backends.plugins import spec_from_dict
from cloudddp.backends.sagemaker import SageMakerBackend
from cloudddp.injob.shim import read_payload
from cloudddp.runs.database import RunDatabase
from tests.support.aws_emulator import aws_environment, own_bucket
from tests.support.cli import ROOT
from tests.support.sagemaker_container import (
    TOOLKITS,
    Aws,
    Rehearsal,
    RehearsalUnavailable,
    record_create_training_job,
    rehearse,
    two_host_flags,
)
from tests.support.wheels import wheel

pytestmark = pytest.mark.slow
REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
CPU_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.4-cpu-py311"
GPU_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.4-gpu-py311"
DIGITS = 800  # samples in the channel's digits.npz: 640 train, so 10 steps of 64 per epoch on one process


@pytest.fixture(scope="module")
def aws(moto_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Aws]:
    """The session's moto and the environment cloudddp submits with (module-wide: rehearsals are shared)."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in {
            **aws_environment(moto_url),
            "CLOUDDDP_HOME": str(tmp_path_factory.mktemp("cloudddp-home")),
        }.items():
            patch.setenv(key, value)
        patch.delenv("AWS_PROFILE", raising=False)
        yield Aws(moto_url, REGION)


def digits_channel(folder: Path) -> Path:
    """A ``train`` channel holding the first DIGITS of scikit-learn's digits as the script's digits.npz."""
    from sklearn.datasets import load_digits

    folder.mkdir(parents=True, exist_ok=True)
    bunch = load_digits()
    np.savez(folder / "digits.npz", images=bunch.images[:DIGITS], labels=bunch.target[:DIGITS])
    return folder


def cpu_job(root: Path, name: str, epochs: int = 2, nodes: int = 1, processes: int = 1) -> dict[str, Any]:
    return {
        "name": name,
        "code": {
            "dir": str(ROOT / "src_train"),
            "entry": "train.py",
            "args": ["--dataset", "digits", "--model", "cnn", "--epochs", str(epochs)],
        },
        "inputs": {"train": {"path": str(digits_channel(root / "data")), "arg": "--data-dir"}},
        "resources": {"nodes": nodes, "gpus_per_node": 0, "processes_per_node": processes, "interconnect": "any"},
        "sagemaker": {
            "region": REGION,
            "role": ROLE,
            "bucket": own_bucket(root),  # the test's own: no checkpoint of an earlier test can be found there
            "instance_type": "ml.m5.xlarge",
            "image": CPU_IMAGE,
        },
    }


def launch(spec: dict[str, Any], token: str) -> dict[str, Any]:
    """Submit ``spec`` to moto through cloudddp; the CreateTrainingJob request exactly as it was sent."""
    session = boto3.session.Session(region_name=REGION)
    sent = record_create_training_job(session)
    backend = SageMakerBackend(records=RunDatabase(), session=session, token=token)
    backend.launch(backend.render(spec_from_dict(spec)))
    assert len(sent) == 1
    return sent[0]


def run(request: dict[str, Any], sandbox: Path, aws: Aws, **kwargs: Any) -> Rehearsal:
    sandbox.mkdir(parents=True, exist_ok=True)
    try:
        return rehearse(request, sandbox, aws, **kwargs)
    except RehearsalUnavailable as e:
        pytest.skip(f"no container rehearsal on this machine: {e}")


def succeeded(rehearsal: Rehearsal) -> None:
    for host in rehearsal.hosts:
        assert host.returncode == 0, f"{host.name} exited {host.returncode}\n{host.failure}\n{host.log[-4000:]}"


def torchrun_argv(rehearsal: Rehearsal, host: str) -> list[str]:
    return shlex.split(rehearsal.host(host).invocation())


def metric_records(rehearsal: Rehearsal, host: str = "algo-1") -> list[dict[str, Any]]:
    return [
        json.loads(line.split("CLOUDDDP_METRIC ", 1)[1])
        for line in rehearsal.host(host).lines
        if "CLOUDDDP_METRIC " in line
    ]


# -- the shared script on one CPU host ---------------------------------------------------------------
@pytest.fixture(scope="module")
def cpu_first(aws: Aws, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], Rehearsal]:
    """A CPU job (the shared script, 2 epochs of digits on ml.m5.xlarge) rehearsed on one host."""
    root = tmp_path_factory.mktemp("cpu")
    request = launch(cpu_job(root, "rehearse-cpu", epochs=2, processes=2), "r1")
    rehearsal = run(request, root / "first", aws)
    print(f"\ncpu rehearsal: {rehearsal.seconds:.1f} s")
    return root, request, rehearsal


def world_size(rehearsal: Rehearsal) -> int:
    argv = torchrun_argv(rehearsal, "algo-1")
    return int(argv[argv.index("--nnodes") + 1]) * int(argv[argv.index("--nproc_per_node") + 1])


def test_a_cpu_job_trains_in_the_container_and_a_second_job_resumes_from_its_checkpoints(
    cpu_first: tuple[Path, dict[str, Any], Rehearsal], aws: Aws
) -> None:
    root, request, first = cpu_first
    succeeded(first)
    host = first.host("algo-1")

    # The toolkit fetched sourcedir.tar.gz from moto's S3 (AWS_ENDPOINT_URL) and started torchrun in it.
    assert (host.opt_ml / "code" / "train.py").is_file()
    assert torchrun_argv(first, "algo-1")[:3] == ["torchrun", "--nnodes", "1"]

    # It trained on the channel's data (640 samples in global batches of 64 × world size) and printed
    # metric lines that the request's own MetricDefinitions extract, with the values the lines carry.
    records = metric_records(first)
    steps = 640 // (64 * world_size(first))
    assert [r["step"] for r in records if "train_loss" in r] == [steps, 2 * steps]
    extracted = first.metrics()
    for name in ("train_loss", "train_acc", "test_loss", "test_acc", "lr", "images_per_sec", "epoch_time"):
        assert extracted[name] == [r[name] for r in records if name in r], name
    assert len(extracted["test_acc"]) == 2

    # The model is in the model dir, the checkpoints at CheckpointConfig.LocalPath and synced to its S3Uri.
    assert request["CheckpointConfig"]["LocalPath"] == "/opt/ml/checkpoints"
    assert (host.opt_ml / "model" / "model.pt").stat().st_size > 0
    local = sorted(p.name for p in (host.opt_ml / "checkpoints").glob("ckpt-*.pt"))
    assert local == ["ckpt-e0001-s0000000.pt", "ckpt-e0002-s0000000.pt"]
    bucket, _, prefix = request["CheckpointConfig"]["S3Uri"].removeprefix("s3://").partition("/")
    listed = boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix + "/")["Contents"]
    assert set(local) <= {o["Key"].rsplit("/", 1)[1] for o in listed}

    # A second job that continues the first for one more epoch (its own arguments would give it a folder of
    # its own, so it names the first one's) finds them restored into /opt/ml/checkpoints and trains epoch 3.
    more = cpu_job(root, "rehearse-cpu", epochs=3, processes=2)
    more["checkpoint"] = {"path": request["CheckpointConfig"]["S3Uri"]}
    second_request = launch(more, "r2")
    assert second_request["CheckpointConfig"] == request["CheckpointConfig"]
    second = run(second_request, root / "second", aws)
    print(f"resumed rehearsal: {second.seconds:.1f} s")
    succeeded(second)
    assert any(
        "resumed from /opt/ml/checkpoints/ckpt-e0002-s0000000.pt" in line for line in second.host("algo-1").lines
    )
    assert [r["epoch"] for r in metric_records(second) if "train_loss" in r] == [3]
    assert (second.host("algo-1").opt_ml / "checkpoints" / "ckpt-e0003-s0000000.pt").is_file()


def test_a_cpu_job_runs_two_processes_per_host(cpu_first: tuple[Path, dict[str, Any], Rehearsal]) -> None:
    _, _, rehearsal = cpu_first
    succeeded(rehearsal)
    argv = torchrun_argv(rehearsal, "algo-1")
    assert argv[argv.index("--nproc_per_node") + 1] == "2"


# -- two hosts ---------------------------------------------------------------------------------------
def test_two_hosts_algo_1_and_algo_2_train_one_model_together(tmp_path: Path, aws: Aws) -> None:
    rehearsal = run(launch(cpu_job(tmp_path, "rehearse-two", epochs=1, nodes=2), "t1"), tmp_path / "box", aws)
    print(f"\ntwo-host rehearsal: {rehearsal.seconds:.1f} s")
    succeeded(rehearsal)
    argvs = [torchrun_argv(rehearsal, host) for host in ("algo-1", "algo-2")]
    per_host = argvs[0][argvs[0].index("--nproc_per_node") + 1]
    for rank, argv in enumerate(argvs):
        assert argv[:11] == ["torchrun", *two_host_flags(rank, per_host)], argv
    # One process group over both hosts: 640 samples / (64 × world size) steps, reported by rank 0 on algo-1.
    assert [r["step"] for r in metric_records(rehearsal) if "train_loss" in r] == [640 // (64 * 2 * int(per_host))]
    assert metric_records(rehearsal, "algo-2") == []
    assert (rehearsal.host("algo-1").opt_ml / "model" / "model.pt").is_file()
    assert not (rehearsal.host("algo-2").opt_ml / "model" / "model.pt").exists()
    assert (rehearsal.host("algo-2").opt_ml / "input" / "data" / "train" / "digits.npz").is_file()


def test_a_network_isolated_job_gets_its_code_and_trains(tmp_path: Path, aws: Aws) -> None:
    job = cpu_job(tmp_path, "rehearse-isolated", epochs=1)
    job["sagemaker"]["network_isolation"] = True
    rehearsal = run(launch(job, "n1"), tmp_path / "box", aws)
    succeeded(rehearsal)
    assert [r["epoch"] for r in metric_records(rehearsal) if "train_loss" in r] == [1]


# -- smddp: up to the runner's command line ----------------------------------------------------------
@pytest.mark.parametrize("toolkit", TOOLKITS)  # 5.1.1 runs mpirun's command line through /bin/sh
def test_smddp_is_rehearsed_up_to_the_toolkits_mpirun_smddprun_command(toolkit: str, tmp_path: Path, aws: Aws) -> None:
    job = cpu_job(tmp_path, "rehearse-smddp", epochs=2)
    job["resources"] = {"nodes": 1, "gpus_per_node": 8}
    job["distribution"] = {"backend": "smddp"}
    job["sagemaker"].update(instance_type="ml.p4d.24xlarge", image=GPU_IMAGE)
    request = launch(job, "s" + toolkit.replace(".", ""))  # a job name per toolkit
    rehearsal = run(request, tmp_path / "box", aws, gpus_per_host=8, toolkit=toolkit)
    host = rehearsal.host("algo-1")
    print(f"\nsmddp rehearsal: {rehearsal.seconds:.1f} s; patches: {rehearsal.patches}")
    assert host.returncode not in (0, None), host.log[-3000:]
    assert "rehearsal: mpirun stops the job here" in host.log
    assert host.failure and "ExecuteUserScriptError" in host.failure

    [call] = host.stub_calls("mpirun")
    argv = call["argv"]
    assert Path(argv[0]).name == "mpirun"
    assert argv[1:6] == ["--host", "algo-1", "-np", "8", "--allow-run-as-root"]
    assert "SMDATAPARALLEL_USE_SINGLENODE=1" in argv and "NCCL_SOCKET_IFNAME=eth0" in argv
    assert argv[argv.index("btl_tcp_if_include") + 1] == "eth0"
    assert any(a.startswith("LD_PRELOAD=") and "gethostname" in a for a in argv)
    # mpirun → smddprun → python -m mpi4py <sagemaker_program> + the arguments the toolkit made of the hyperparameters.
    tail = argv[argv.index("smddprun") :]
    assert Path(tail[1]).name == "python"
    assert tail[2:5] == ["-m", "mpi4py", json.loads(request["HyperParameters"]["sagemaker_program"])]
    assert tail[5:] == json.loads(call["env"]["SM_USER_ARGS"])
    # ...which are the shipped launcher's: the script's own argv and the contract travel in them, so ranks
    # on other hosts get them too (mpirun forwards only the -x list above).
    payload = read_payload(tail[5:])
    assert payload["argv"][:3] == ["train.py", "--dataset", "digits"] and payload["python"] is True
    assert payload["env"]["CLOUDDDP_DIST_BACKEND"] == "smddp"
    # mpirun runs with the request's Environment (smddp chosen for the script) and the toolkit's SM_ variables.
    assert call["env"]["CLOUDDDP_DIST_BACKEND"] == "smddp" and call["env"]["SM_NUM_GPUS"] == "8"
    assert host.stub_calls("smddprun") == []  # the stub mpirun stopped before launching anything


# -- what the script receives: arguments and environment ---------------------------------------------
PROBE = """# Records what the container gives the script: argv and environment, per rank.
import json, os, sys
import rehearsal_dep  # installed by the toolkit from requirements.txt
rank = os.environ.get("RANK", "norank")
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"probe-{rank}.json"), "w") as f:
    json.dump({"argv": sys.argv, "env": dict(os.environ), "dep": rehearsal_dep.VALUE,
               "dep_file": rehearsal_dep.__file__}, f)
"""
AWKWARD = [
    "--flag",
    "true",
    "--lr",
    "1e-3",
    "--ratio",
    "0.10",
    "--nothing",
    "null",
    "--obj",
    '{"a":1}',
    "--text",
    "a b",
    "--quoted",
    '"q"',
    "--inner",
    'say "hi"',
    "--empty=",
    "--count",
    "007",
    "--plain",
    "x",
]
PLAIN = {
    "--text": "a b",
    "--inner": 'say "hi"',
    "--count": "007",
    "--plain": "x",
    "--data-dir": "/opt/ml/input/data/train",
}  # values the toolkit's JSON decoding leaves alone
SPEC_NCCL = {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "lo"}


def probe_job(root: Path, name: str, args: list[str]) -> dict[str, Any]:
    code = root / "probe-code"
    (code / "wheels").mkdir(parents=True, exist_ok=True)
    (code / "probe.py").write_text(PROBE)
    (code / "requirements.txt").write_text(f"--no-index\n./wheels/{wheel(code / 'wheels').name}\n")
    job = cpu_job(root, name)
    job["code"] = {"dir": str(code), "entry": "probe.py", "args": args}
    job["env"] = dict(SPEC_NCCL)
    return job


def probes(rehearsal: Rehearsal) -> list[dict[str, Any]]:
    folder = rehearsal.host("algo-1").opt_ml / "model"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("probe-*.json"))]


@pytest.fixture(scope="module")
def probe(aws: Aws, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Rehearsal, dict[str, Any]]:
    """One rehearsal of a probe script (awkward arguments, NCCL variables in the spec): request, run, record."""
    root = tmp_path_factory.mktemp("probe")
    request = launch(probe_job(root, "rehearse-probe", AWKWARD), "e1")
    rehearsal = run(request, root / "box", aws)
    print(f"\nprobe rehearsal: {rehearsal.seconds:.1f} s")
    succeeded(rehearsal)
    [record] = probes(rehearsal)
    return request, rehearsal, record


def options(argv: list[str]) -> dict[str, str]:
    """``--key value`` and ``--key=value`` options as a dict."""
    found, i = {}, 0
    while i < len(argv):
        key, eq, value = argv[i].partition("=")
        if eq:
            found[key], i = value, i + 1
        else:
            found[key], i = argv[i + 1], i + 2
    return found


def test_the_script_gets_requirements_plain_values_and_the_containers_environment(
    probe: tuple[dict[str, Any], Rehearsal, dict[str, Any]],
) -> None:
    request, rehearsal, record = probe
    # requirements.txt went into the container's Python (the rehearsal's venv), not the shared one.
    assert record["dep"] == "from requirements.txt"
    assert record["dep_file"].startswith(str(rehearsal.host("algo-1").folder / "python"))
    # Values that are not JSON come back unchanged, the input's path as the request set it.
    assert PLAIN.items() <= options(record["argv"][1:]).items()
    env = record["env"]
    assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")} == {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
    }
    assert env["MASTER_ADDR"] == "algo-1" and env["MASTER_PORT"].isdigit()
    assert env["SM_CURRENT_HOST"] == "algo-1" and json.loads(env["SM_HOSTS"]) == ["algo-1"]
    assert env["SM_CHANNEL_TRAIN"] == "/opt/ml/input/data/train" and env["SM_MODEL_DIR"] == "/opt/ml/model"
    assert env["TRAINING_JOB_NAME"] == env["SAGEMAKER_JOB_NAME"] == request["TrainingJobName"]
    assert env["OMP_WAIT_POLICY"] == "PASSIVE"  # the rig's hosts share this machine's cores (tests/support/cores.py)
    for key, value in request["Environment"].items():  # the request's Environment reaches the script...
        if key not in SPEC_NCCL:  # ...except what the toolkit overwrites (next test)
            assert env[key] == value, key


def test_the_specs_nccl_variables_reach_the_script(probe: tuple[dict[str, Any], Rehearsal, dict[str, Any]]) -> None:
    request, _, record = probe
    assert {k: request["Environment"][k] for k in SPEC_NCCL} == SPEC_NCCL  # sent as the spec says
    assert {k: record["env"][k] for k in SPEC_NCCL} == SPEC_NCCL


def test_awkward_argument_values_reach_the_script_unchanged(
    probe: tuple[dict[str, Any], Rehearsal, dict[str, Any]],
) -> None:
    _, _, record = probe
    assert options(record["argv"][1:]) == {**options(AWKWARD), "--data-dir": "/opt/ml/input/data/train"}


def test_the_script_gets_the_exact_argv_of_the_spec(tmp_path: Path, aws: Aws) -> None:
    args = ["--zeta", "1", "--alpha=2", "--verbose", "--tag", "a", "--tag", "b"]
    rehearsal = run(launch(probe_job(tmp_path, "rehearse-argv", args), "a1"), tmp_path / "box", aws)
    succeeded(rehearsal)
    [record] = probes(rehearsal)
    assert record["argv"][1:] == [*args, "--data-dir", "/opt/ml/input/data/train"]


def test_the_script_sees_the_runtime_contract(probe: tuple[dict[str, Any], Rehearsal, dict[str, Any]]) -> None:
    request, _, record = probe
    env = record["env"]
    assert env["CLOUDDDP_CHECKPOINT_DIR"] == "/opt/ml/checkpoints" and env["PYTHONUNBUFFERED"] == "1"
    assert env["CLOUDDDP_DIST_BACKEND"] == "gloo" and env["CLOUDDDP_COLLECTIVE_TIMEOUT"].isdigit()
    assert env.get("CLOUDDDP_JOB_NAME") == "rehearse-probe"
    assert env.get("CLOUDDDP_RUN_ID") == request["TrainingJobName"]
    assert env.get("CLOUDDDP_BACKEND") == "sagemaker"
    assert env.get("CLOUDDDP_INPUT_TRAIN") == "/opt/ml/input/data/train"
    assert env.get("CLOUDDDP_MODEL_DIR") == "/opt/ml/model"
