"""A job's Python dependencies are installed before its script starts, on every backend; a requirement that
cannot be installed fails before training with the package named."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.status import RunState
from cloudddp.runtime import code_snapshot
from tests.support.cli import cli
from tests.support.harnesses import SageMakerHarness
from tests.support.wheels import wheel

SCRIPT = """import json, os
import rehearsal_dep
with open(os.path.join(os.environ["CLOUDDDP_MODEL_DIR"], "dep.json"), "w") as f:
    json.dump({"value": rehearsal_dep.VALUE, "file": rehearsal_dep.__file__}, f)
"""


def job_folder(tmp_path: Path, requirements: list[str]) -> Path:
    code = tmp_path / "code"
    (code / "wheels").mkdir(parents=True)
    (code / "train.py").write_text(SCRIPT)
    wheel(code / "wheels")
    spec = tmp_path / "job.yaml"
    spec.write_text(
        json.dumps(
            {
                "name": "deps",
                "code": {"dir": str(code), "requirements": requirements},
                "local": {"processes_per_node": 1},
            }
        )
    )
    return spec


@pytest.mark.slow
def test_a_missing_requirement_is_installed_into_an_environment_made_for_it_and_reused(
    tmp_path: Path, cloudddp_home: Path
) -> None:
    spec = job_folder(tmp_path, ["--no-index", "./wheels/rehearsal_dep-1.0-py3-none-any.whl"])
    first = cli("submit", str(spec), timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "requirements installed in" in first.stderr
    outputs = sorted((cloudddp_home / "runs").glob("deps-*/outputs/dep.json"))
    used = json.loads(outputs[0].read_text())
    assert used["value"] == "from requirements.txt" and str(cloudddp_home / "envs") in used["file"]
    again = cli("submit", str(spec), timeout=300)
    assert again.returncode == 0 and "requirements installed earlier in" in again.stderr, again.stderr[-2000:]


@pytest.mark.slow
def test_requirements_this_python_has_run_here_and_one_that_cannot_be_installed_fails_before_training(
    tmp_path: Path,
) -> None:
    here = Job.load(job_folder(tmp_path / "a", ["numpy"]), ["code.entry=probe.py"])
    (here.spec.code_dir / "probe.py").write_text("print('ran')\n")
    run = here.submit("local")
    assert run.wait(timeout=120, poll=0.2).state is RunState.SUCCEEDED
    bad = cli("submit", str(job_folder(tmp_path / "b", ["--no-index", "no-such-package-for-cloudddp==1.0"])))
    assert bad.returncode == 2 and "no-such-package-for-cloudddp" in bad.stderr, bad.stderr[-2000:]
    assert "Traceback" not in bad.stderr and "started" not in bad.stderr


def test_a_malformed_requirement_is_refused_at_render_naming_it(tmp_path: Path) -> None:
    result = cli("render", str(job_folder(tmp_path, ["torch>=>2"])))
    assert result.returncode == 2 and "'torch>=>2' is not a requirement pip can read" in result.stderr
    both = job_folder(tmp_path / "both", ["numpy"])
    (Path(json.loads(both.read_text())["code"]["dir"]) / "requirements.txt").write_text("numpy\n")
    refused = cli("render", str(both))
    assert refused.returncode == 2 and "both list dependencies" in refused.stderr


def test_the_sagemaker_container_gets_them_as_requirements_txt_in_the_snapshot(tmp_path: Path) -> None:
    spec = Job.load(job_folder(tmp_path, ["einops>=0.7", "--no-index"]), SageMakerHarness.overrides).spec
    plan = Job(spec).render("sagemaker")
    assert any("the container installs the snapshot's requirements.txt" in d for d in plan.decisions)
    with tarfile.open(code_snapshot(spec).path) as tar:
        listed = tar.extractfile("requirements.txt")
        assert listed is not None and io.TextIOWrapper(listed).read() == "einops>=0.7\n--no-index\n"


@pytest.mark.slow
def test_on_azure_ml_the_shipped_launcher_installs_them_before_the_program_once_per_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rendered Azure ML job, run as Azure's PyTorch distribution runs it (2 nodes here): the first
    process to start installs the wheel into an environment over this Python, under the node's lock; every
    process then imports it. Both emulated nodes share this machine's temporary folder, so one install."""
    from cloudddp.backends.azureml import AzureMLBackend
    from tests.support.azure_launchers import Datastores, launch_pytorch

    monkeypatch.setenv("TMPDIR", str(tmp_path / "node-tmp"))
    (tmp_path / "node-tmp").mkdir()
    spec = Job.load(
        job_folder(tmp_path, ["--no-index", "./wheels/rehearsal_dep-1.0-py3-none-any.whl"]),
        ["resources.nodes=2", "resources.gpus_per_node=0", "azureml.compute=cpu", "azureml.vm_size=Standard_D4s_v3"],
    ).spec
    plan = AzureMLBackend(token="deps").render(spec)
    assert any("installed by the shipped launcher on each node" in d for d in plan.decisions), plan.decisions
    run = launch_pytorch(plan.request["job"], tmp_path / "run", Datastores(tmp_path / "blob"))
    assert run.ok, run.describe()
    logs = "".join(run.logs.values())
    assert logs.count("installing requirements.txt into") == 1, run.describe()
    used = json.loads((run.outputs["model"] / "dep.json").read_text())
    assert used["value"] == "from requirements.txt" and used["file"].startswith(str(tmp_path / "node-tmp"))
