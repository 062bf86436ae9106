"""One spec for every shape: ``{{nodes}}``, ``{{processes_per_node}}``, ``{{world_size}}``, ``{{checkpoint_dir}}``,
``{{inputs.NAME}}``... in the arguments and the environment are expanded per backend, and ``render`` shows them
expanded; ``CLOUDDDP_NUM_NODES``/``CLOUDDDP_PROCESSES_PER_NODE`` are set everywhere, and Accelerate is told
there is no GPU where there is none. The real runs with a framework that needs the shape (Lightning's
``num_nodes``): tests/across_backends/test_frameworks.py."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from cloudddp.api import Job
from cloudddp.errors import UserError
from cloudddp.plan import Plan
from cloudddp.runs.runner import get_backend
from tests.support.cli import FIXTURES, cli
from tests.support.harnesses import AzureMLHarness, SageMakerHarness

SHAPED = FIXTURES / "shaped" / "job.yaml"


def _argv(plan: Plan[Any]) -> list[str]:
    """The training program's arguments as the backend will run them, from what ``render`` shows."""
    if plan.backend == "sagemaker":  # the argv travels base64-encoded; the plan shows it in words
        line = next(d for d in plan.decisions if d.startswith("each process runs: "))
        words = shlex.split(line.removeprefix("each process runs: ").split(" (in the launcher's payload")[0])
    else:
        text = plan.documents.get("torchrun.sh") or plan.documents.get("job.sbatch") or plan.request["job"]["command"]
        line = next(line for line in text.replace("\\\n", " ").splitlines() if " train.py " in line)
        words = shlex.split("train.py " + line.split(" train.py ", 1)[1])
    return words[words.index("train.py") + 1 :]


def _plans() -> dict[str, Plan[Any]]:
    slurm = get_backend("slurm", token="t1").render(Job.load(SHAPED).spec)
    return {
        "local": Job.load(SHAPED).render("local"),
        "slurm": slurm,
        "sagemaker": Job.load(SHAPED, SageMakerHarness.overrides).render("sagemaker"),
        "azureml": Job.load(SHAPED, AzureMLHarness.overrides).render("azureml"),
    }


def _env(plan: Plan[Any]) -> dict[str, str]:
    if plan.backend == "azureml":
        return dict(plan.request["job"]["environment_variables"])
    if plan.backend == "sagemaker":
        return dict(plan.request["Environment"])
    return dict(plan.request.env)


def test_one_spec_names_each_backends_own_shape_and_places_and_render_shows_them_expanded() -> None:
    plans = _plans()
    cloud = ("2", "3", "6")  # resources.*: 2 nodes x 3 processes
    shapes = {"local": ("2", "1", "2"), "slurm": cloud, "sagemaker": cloud, "azureml": cloud}
    for backend, plan in plans.items():
        argv = _argv(plan)
        nodes, per_node, world = shapes[backend]
        assert argv[:6] == ["--num_nodes", nodes, "--devices", per_node, "--world", world], (backend, argv)
        env = _env(plan)
        assert (env["CLOUDDDP_NUM_NODES"], env["CLOUDDDP_PROCESSES_PER_NODE"]) == (nodes, per_node), backend
        assert env["SHAPE"] == f"{nodes}x{per_node}", backend
        assert argv[argv.index("--filename") + 1] == "{epoch}-{step}", "a framework's own format field is left alone"
        assert not any(re.search(r"(?<!\$)\{\{", word) for word in argv), (backend, argv)
    out = {b: _argv(p)[_argv(p).index("--out") + 1] for b, p in plans.items()}
    data = {b: _argv(p)[_argv(p).index("--data") + 1] for b, p in plans.items()}
    assert out["local"] == plans["local"].request.env["CLOUDDDP_CHECKPOINT_DIR"] + "/hf"
    assert out["sagemaker"] == "/opt/ml/checkpoints/hf" and data["sagemaker"] == "/opt/ml/input/data/data"
    assert out["azureml"] == "${{outputs.checkpoints}}/hf" and data["azureml"] == "${{inputs.data}}"
    assert data["local"] == str(SHAPED.parent.resolve())


def test_accelerate_is_told_to_use_the_cpu_only_where_the_job_has_no_gpu() -> None:
    cpu = Job.load(SHAPED, SageMakerHarness.overrides).render("sagemaker")
    assert _env(cpu)["ACCELERATE_USE_CPU"] == "true"
    gpu = Job.load(
        SHAPED,
        [
            *SageMakerHarness.overrides,
            "resources.gpus_per_node=8",
            "resources.processes_per_node=8",
            "sagemaker.instance_type=ml.p4d.24xlarge",
        ],
    ).render("sagemaker")
    assert "ACCELERATE_USE_CPU" not in _env(gpu)
    mine = Job.load(SHAPED, ["env.ACCELERATE_USE_CPU='false'"]).render("local")
    assert _env(mine)["ACCELERATE_USE_CPU"] == "false", "the spec's own value wins"


def test_a_placeholder_for_a_folder_the_job_does_not_have_is_a_clear_error() -> None:
    with pytest.raises(UserError) as caught:
        Job.load(SHAPED, ["checkpoint.enabled=false"]).render("local")
    assert "code.args: {{checkpoint_dir}} names a folder this job does not have" in str(caught.value)
    assert "checkpoint" in (caught.value.hint or "")


def test_an_unknown_placeholder_fails_at_load_with_its_line_and_the_closest_name(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(SHAPED.read_text().replace('"{{world_size}}"', '"{{world}}"').replace("{{nodes}}x", "{{node}}x"))
    (tmp_path / "train.py").write_text("")
    result = cli("validate", str(spec))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "job.yaml:6: code.args: unknown placeholder {{world}}" in result.stderr
    assert "did you mean {{world_size}}?" in result.stderr
    spec.write_text(SHAPED.read_text().replace("{{nodes}}x", "{{node}}x"))
    result = cli("validate", str(spec))
    assert result.returncode == 2 and "job.yaml:14: env.SHAPE: unknown placeholder {{node}}" in result.stderr
    spec.write_text(SHAPED.read_text().replace("{{inputs.data}}", "{{inputs.dta}}"))
    result = cli("validate", str(spec))
    assert result.returncode == 2 and "did you mean {{inputs.data}}?" in result.stderr


def test_secret_values_and_azure_ml_bindings_are_never_expanded() -> None:
    plan = Job.load(
        SHAPED, [*AzureMLHarness.overrides, "code.args=[--out, '${{outputs.model}}/x', --n, '{{nodes}}']"]
    ).render("azureml")
    assert "--out ${{outputs.model}}/x --n 2" in plan.request["job"]["command"]
    secret = Job.load(SHAPED, ["env.TOKEN={value: 'x{{nodes}}-long-enough-secret', secret: true}"]).render("local")
    assert "x{{nodes}}" not in str(_env(secret).get("TOKEN")), "a secret is a placeholder in the plan, never text"
    assert secret.secret_values({}) == ["x{{nodes}}-long-enough-secret"]
