"""``limits.queue_timeout``: how long a job Azure ML keeps ``Queued`` may wait before a recovery that can move
cancels it and moves on. The plan says it where a recovery can move (``recover_to: next_size``, ``-b auto``), and a
bad value is refused naming the field. The moves themselves, through the rig: test_next_size.py."""

from __future__ import annotations

import pytest

from cloudddp.api import Job
from cloudddp.backends.azureml import AzureMLBackend
from cloudddp.backends.plugins import load_spec
from tests.support.cli import ROOT, cli
from tests.support.harnesses import AzureMLHarness, SageMakerHarness

AZURE_JOB = ROOT / "jobs" / "cifar10-azureml.yaml"
SERVERLESS = ["azureml.compute=null", "limits.max_recoveries=2"]


def decisions(*overrides: str) -> list[str]:
    return AzureMLBackend(token="t").render(load_spec(AZURE_JOB, [*SERVERLESS, *overrides])).decisions


def test_the_plan_says_the_queue_time_where_a_recovery_can_move_and_only_there() -> None:
    said = " ".join(decisions("limits.recover_to=next_size", "limits.queue_timeout=30m"))
    assert "a job still Queued after limits.queue_timeout (30m) is cancelled" in said, said
    assert "a refusal for quota at submission moves at once" in said
    assert "limits.queue_timeout (1h)" in " ".join(decisions("limits.recover_to=next_size"))  # the default
    assert "queue_timeout" not in " ".join(decisions())  # same_size: nowhere to move, a queued job waits


def test_b_auto_says_the_queue_time_in_its_ranking() -> None:
    clouds = [
        o
        for o in [*SageMakerHarness.overrides, *AzureMLHarness.overrides]
        if not o.startswith(("sagemaker.instance_type", "azureml.vm_size", "sagemaker.image", "azureml.compute"))
    ]
    job = Job.load(
        ROOT / "jobs" / "cifar10-resnet18.yaml", [*clouds, "backends=[azureml, sagemaker]", "limits.queue_timeout=45m"]
    )
    said = job.place(checks=False)[0].plan.decisions[0]  # type: ignore[union-attr]
    assert said.startswith("placement (-b auto)") and "limits.queue_timeout (45m) is cancelled" in said, said


@pytest.mark.parametrize("value", ["0", "soon", "-5", "30d"])
def test_a_bad_queue_time_exits_2_naming_the_field(value: str) -> None:
    result = cli("render", str(AZURE_JOB), "-b", "azureml", "-o", f"limits.queue_timeout={value}")
    assert result.returncode == 2, result.stderr
    assert "limits.queue_timeout" in result.stderr and "Traceback" not in result.stderr, result.stderr
