"""A person's own DDP script, first class: it runs as written on every backend, shows its output and its
metrics, gets exactly its arguments, and its checkpoints belong to its job."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cloudddp.api import Job, Run
from cloudddp.backends.status import RunState
from cloudddp.injob.shim import read_payload
from cloudddp.runs.runner import get_backend
from cloudddp.runtime import NAMES, shipped_files
from tests.support.cli import FIXTURES, ROOT, cli
from tests.support.harnesses import AzureMLHarness, SageMakerHarness

pytestmark = pytest.mark.slow
OWN = FIXTURES / "ownscript"
AWKWARD = [
    "7",
    "--flag=true",
    "--lr",
    "1e-3",
    "--ratio",
    "0.10",
    "--text",
    "a b",
    "--obj",
    '{"k":1}',
    "--quoted",
    '"q"',
    "--nothing",
    "null",
    "--verbose",
    "--tag",
    "x",
    "--tag",
    "y",
]
PROBE = """import json, os, sys
with open(os.path.join(os.environ["CLOUDDDP_MODEL_DIR"], f"argv-{os.environ.get('RANK', '0')}.json"), "w") as f:
    json.dump(sys.argv[1:], f)
print("argv", json.dumps(sys.argv[1:]))
"""


def folder_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def test_a_tutorial_ddp_script_runs_on_two_nodes_shows_its_output_and_leaves_its_folder_alone() -> None:
    before = folder_digest(OWN)
    result = cli("submit", str(OWN / "job.yaml"), "-b", "local", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    # Its own print() output, rank 0's by default; a line it declared as a metric once, as printed (not
    # again as a record), while `metrics` has the records.
    assert "[node0/rank0] Epoch 2 | Training snapshot saved at snapshot.pt" in result.stdout, result.stdout[-3000:]
    assert "[GPU1]" not in result.stdout and "[GPU3]" not in result.stdout
    assert result.stdout.count("[GPU0] Epoch 3 | Steps: 2 | loss ") == 1, result.stdout[-3000:]
    assert not re.search(r"epoch 3\s+loss=", result.stdout), result.stdout[-3000:]
    # It ran the shipped snapshot in the run's folder: its snapshot.pt is there, not in the source tree.
    assert folder_digest(OWN) == before and not (OWN / "snapshot.pt").exists()
    run_id = result.stderr.split("submitted ")[1].split()[0]
    run = Run.attach(run_id)
    code = Path(run.status().details["run_dir"]) / "code"
    assert (code / "snapshot.pt").is_file() and (code / "train.py").read_bytes() == (OWN / "train.py").read_bytes()
    assert [r.epoch for r in run.metrics()] == [0, 1, 2, 3] and all("loss" in r.values for r in run.metrics())
    every = cli(
        "submit", str(OWN / "job.yaml"), "-b", "local", "--all-ranks", "-o", "code.args=['2', '1']", timeout=300
    )
    assert every.returncode == 0, every.stderr[-2000:]
    assert all(f"[GPU{r}] Epoch 1" in every.stdout for r in (1, 2, 3)), every.stdout[-2000:]  # rank 0's: a record


def test_declared_metrics_go_into_the_sagemaker_request() -> None:
    spec = Job.load(OWN / "job.yaml", SageMakerHarness.overrides).spec
    definitions = get_backend("sagemaker").render(spec).request["AlgorithmSpecification"]["MetricDefinitions"]
    declared = {d["Name"]: d["Regex"] for d in definitions}
    # Global rank 0's lines only: the launcher's [rank0]: prefix, then the declared regex.
    loss, epoch = spec.metrics.declared
    assert (
        declared["loss"] == rf"\[rank0\]:.*?(?:{loss.regex})"
        and declared["epoch"] == rf"\[rank0\]:.*?(?:{epoch.regex})"
    )
    assert re.search(declared["loss"], "[rank0]:[GPU0] Epoch 1 | Steps: 4 | loss 0.5").group(1) == "0.5"
    assert not re.search(declared["loss"], "[rank1]:[GPU0] Epoch 1 | Steps: 4 | loss 0.5")


def probe_folder(tmp_path: Path) -> Path:
    code = tmp_path / "probe"
    code.mkdir()
    (code / "probe.py").write_text(PROBE)
    return code


def test_the_script_gets_exactly_the_specs_arguments_locally(tmp_path: Path) -> None:
    job = Job.create(
        "argv",
        base_dir=tmp_path,
        code={"dir": str(probe_folder(tmp_path)), "entry": "probe.py", "args": AWKWARD},
        local={"processes_per_node": 1},
    )
    run = job.submit("local")
    assert run.wait(timeout=120, poll=0.2).state is RunState.SUCCEEDED
    outputs = Path(run.status().details["run_dir"]) / "outputs"
    assert json.loads((outputs / "argv-0.json").read_text()) == AWKWARD


def test_the_script_gets_exactly_the_specs_arguments_from_the_rendered_azure_ml_command(tmp_path: Path) -> None:
    code = probe_folder(tmp_path)
    job = tmp_path / "job.yaml"
    job.write_text(json.dumps({"name": "argv", "code": {"dir": str(code), "entry": "probe.py", "args": AWKWARD}}))
    spec = Job.load(job, AzureMLHarness.overrides).spec
    command = get_backend("azureml").render(spec).request["job"]["command"]
    model = tmp_path / "model"
    model.mkdir()
    for name, data in shipped_files().items():  # the snapshot Azure ML unpacks holds cloudddp's rank launcher
        (code / name).write_bytes(data)
    # What Azure ML does with the command: binds ${{outputs.model}} and runs it with bash in the code folder.
    bound = command.replace("${{outputs.model}}", shlex.quote(str(model)))
    bound = bound.replace("${{outputs.checkpoints}}", shlex.quote(str(tmp_path / "ckpt")))
    done = subprocess.run(
        ["bash", "-c", bound],
        cwd=code,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads((model / "argv-0.json").read_text()) == AWKWARD


def test_the_sagemaker_launcher_carries_exactly_the_specs_arguments(tmp_path: Path) -> None:
    spec = Job.load(OWN / "job.yaml", [*SageMakerHarness.overrides, f"code.args={json.dumps(AWKWARD)}"]).spec
    hp = get_backend("sagemaker").render(spec).request["HyperParameters"]
    args = [a for key in sorted(hp) if key.startswith("cloudddp-") for a in (f"--{key}", json.loads(hp[key]))]
    assert read_payload(args)["argv"] == ["train.py", *AWKWARD]  # the container run is in test_sagemaker_container


def test_the_documented_contract_is_what_every_backend_sets() -> None:
    section = (ROOT / "docs" / "runtime-contract.md").read_text()
    documented = set(re.findall(r"`(CLOUDDDP_[A-Z_]+?)(?:<NAME>)?`", section)) - {
        "CLOUDDDP_METRIC",
        "CLOUDDDP_HOME",
        "CLOUDDDP_CANCEL_GRACE",
    }
    assert documented == {*NAMES, "CLOUDDDP_INPUT_"}, documented ^ {*NAMES, "CLOUDDDP_INPUT_"}
    spec_overrides = [
        "inputs.data.path=.",
        "outputs.tensorboard.path=null",
        *SageMakerHarness.overrides,
        *AzureMLHarness.overrides,
    ]
    for backend in ("local", "sagemaker", "azureml"):
        plan = Job.load(OWN / "job.yaml", spec_overrides).render(backend)
        text = json.dumps(plan.to_dict()["request"])
        for name in [*NAMES, "CLOUDDDP_INPUT_DATA", "PYTHONUNBUFFERED"]:
            assert name in text, (backend, name)


PRINTER = """for epoch in range(3):
    print(f"[GPU0] Epoch {epoch} | Steps: 2 | loss {1 / (epoch + 1):.4f}", flush=True)
"""


def test_declared_metrics_reach_mlflow_from_the_rendered_azure_ml_command(tmp_path: Path, mlflow_server) -> None:
    from mlflow.tracking import MlflowClient

    code = tmp_path / "printer"
    code.mkdir()
    (code / "train.py").write_text(PRINTER)
    job = tmp_path / "job.yaml"
    spec_data = {
        "name": "printer",
        "code": {"dir": str(code)},
        "metrics": [m.model_dump() for m in Job.load(OWN / "job.yaml").spec.metrics.declared],
    }
    job.write_text(json.dumps(spec_data))
    plan = get_backend("azureml").render(Job.load(job, AzureMLHarness.overrides).spec)
    command, folder = plan.request["job"]["command"], Path(plan.request["job"]["code"])
    assert (folder / "train.py").read_text() == PRINTER and (folder / "_cloudddp_launch.py").is_file()
    # As Azure ML runs it: outputs bound, in the uploaded code folder, inside the job's MLflow run.
    client = MlflowClient(tracking_uri=mlflow_server.url)
    run_id = client.create_run(client.create_experiment(f"printer-{os.getpid()}")).info.run_id
    bound = command.replace("${{outputs.model}}", str(tmp_path)).replace("${{outputs.checkpoints}}", str(tmp_path))
    done = subprocess.run(
        ["bash", "-c", bound],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "MLFLOW_TRACKING_URI": mlflow_server.url,
            "MLFLOW_RUN_ID": run_id,
            "RANK": "0",
        },
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "[GPU0] Epoch 2 | Steps: 2 | loss 0.3333" in done.stdout  # the output is copied through
    history = client.get_metric_history(run_id, "loss")
    logged = [(m.step, round(m.value, 4)) for m in history]
    assert logged == [(0, 1.0), (1, 0.5), (2, 0.3333)], done.stderr[-2000:]  # the shim says why it stopped logging


@pytest.mark.parametrize("number", [signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV])
def test_the_rank_launcher_ends_by_the_signal_that_ended_its_program(number: int) -> None:
    program = [sys.executable, "-c", f"import os; os.kill(os.getpid(), {int(number)})"]
    done = subprocess.run([sys.executable, "-m", "cloudddp.injob.shim", "--cloudddp-00", "{}", "--", *program])
    assert done.returncode == -number  # the launcher above (torchrun) sees the program's own end
