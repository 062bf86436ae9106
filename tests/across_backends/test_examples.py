"""The framework projects of ``examples/`` run as they are: each job.yaml renders for every backend with the
backend's own shape in the framework's arguments, and trains locally at 1×2 and 2×2 (``local.*``) unchanged.

Stopping and resuming them, with their metrics, is the conformance matrix (tests/across_backends/
test_frameworks.py and the backends' cells); the runs here at the other local shape are in ``make conformance``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.status import RunState
from tests.support.cli import ROOT
from tests.support.harnesses import AzureMLHarness, SageMakerHarness

EXAMPLES = ["lightning", "huggingface", "accelerate"]
HARNESSES = {"sagemaker": SageMakerHarness, "azureml": AzureMLHarness}


def spec_of(name: str) -> Path:
    return ROOT / "examples" / name / "job.yaml"


def sent(backend: str, name: str) -> str:
    """What ``render`` says the backend is sent to run the example: the script (local, Slurm), the job's command
    and variables (Azure ML), the argv the launcher's base64 payload carries, as the plan words it (SageMaker)."""
    overrides = list(getattr(HARNESSES.get(backend), "overrides", []))
    overrides = [o for o in overrides if not o.split("=")[0].endswith(("instance_type", "vm_size"))]
    plan = Job.load(spec_of(name), overrides).render(backend)
    if backend == "azureml":
        return plan.request["job"]["command"] + "\n" + str(plan.request["job"]["environment_variables"])
    if backend == "sagemaker":
        return "\n".join(d for d in plan.decisions if d.startswith("each process runs:"))
    return "\n".join(plan.documents.values())


@pytest.mark.parametrize("name", EXAMPLES)
@pytest.mark.parametrize("backend", ["local", "slurm", "sagemaker", "azureml"])
def test_each_example_renders_for_every_backend_with_that_backends_shape(name: str, backend: str) -> None:
    text = sent(backend, name)
    left = re.sub(r"\$\{\{[^}]*\}\}|\{\{last_checkpoint:[^{}\s]*\}\}", "", text)  # Azure ML's; the launcher's
    assert "train.py" in text and "{{" not in left, text[-2000:]
    if name == "lightning":
        nodes, devices = ("1", "2") if backend == "local" else ("2", "2")
        words = " ".join(re.sub(r"[\\'\",\[\]]", " ", text).split())
        assert f"--num-nodes {nodes} --devices {devices} " in words, text[-2000:]


def run_example(name: str, nodes: int, processes: int) -> str:
    """The example trained at ``nodes`` × ``processes`` here, unchanged but for the shape; its log."""
    shape = [f"local.nodes={nodes}", f"local.processes_per_node={processes}"]
    run = Job.load(spec_of(name), shape).submit("local")
    status = run.wait(timeout=240, poll=0.5)
    log = "\n".join(line.text for line in run.logs())
    assert status.state is RunState.SUCCEEDED, log[-3000:]
    return log


FINAL_STEP = {
    # (example, world size) -> the step each ends at: a world that is not one trains every sample once per epoch
    ("lightning", 2): 112,  # 1792 samples / 32 / 2 ranks = 28 steps an epoch, 4 epochs
    ("lightning", 4): 56,
    ("huggingface", 2): 60,  # max_steps
    ("huggingface", 4): 60,
    ("accelerate", 2): 96,  # 2048 / 32 / 2 = 32 steps an epoch, 3 epochs
    ("accelerate", 4): 48,
}


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("name", "nodes", "processes"), [("lightning", 1, 2), ("huggingface", 1, 2)])
def test_an_example_trains_here_unchanged(name: str, nodes: int, processes: int) -> None:
    log = run_example(name, nodes, processes)
    assert f"finished at step {FINAL_STEP[(name, nodes * processes)]}" in log, log[-3000:]


@pytest.mark.slow
@pytest.mark.conformance
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("name", "nodes", "processes"), [("lightning", 2, 2), ("huggingface", 2, 2), ("accelerate", 1, 2)]
)
def test_an_example_trains_here_unchanged_at_its_other_shape(name: str, nodes: int, processes: int) -> None:
    log = run_example(name, nodes, processes)
    assert f"finished at step {FINAL_STEP[(name, nodes * processes)]}" in log, log[-3000:]
