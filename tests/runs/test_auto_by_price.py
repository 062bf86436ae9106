"""``-b auto`` for a script without a whole-job estimate ranks the backends by the price per hour of the whole
allocation (the order of preference only breaks ties), each line keeping its figure's kind (``*``: EC2's price, a
lower bound for SageMaker's) and the ceiling ``limits.max_runtime`` sets."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import FIXTURES, cli

SETTINGS = [
    "resources.gpus_per_node=1",
    "resources.nodes=1",
    "azureml.subscription_id=00000000-0000-0000-0000-000000000000",
    "azureml.resource_group=rg",
    "azureml.workspace=ws",
    "sagemaker.region=us-east-1",
    "sagemaker.role=arn:aws:iam::123456789012:role/r",
]


def test_an_own_script_is_placed_by_price_per_hour_and_keeps_the_lower_bound_mark(tmp_path: Path) -> None:
    overrides = [a for o in ["backends=[sagemaker, azureml]", *SETTINGS] for a in ("-o", o)]
    shown = cli("submit", str(FIXTURES / "ownscript" / "job.yaml"), "-b", "auto", "--dry-run", *overrides, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    lines = [line.strip() for line in shown.stderr.splitlines()]
    first = next(line for line in lines if line.startswith("1. "))
    second = next(line for line in lines if line.startswith("2. "))
    # SageMaker is preferred, but Azure ML's T4 at $0.53/h is cheaper than SageMaker's ml.g6.xlarge at $0.80*/h.
    assert first.startswith("1. azureml: $0.53/h for all nodes") and "at most $12.62" in first, first
    assert second.startswith("2. sagemaker: $0.80*/h for all nodes") and "at most $19.32*" in second, second
    assert any("lower bound" in line for line in lines), lines
    assert "Standard_NC4as_T4_v3" in shown.stdout  # the plan shown is the first's


def test_a_price_from_another_region_keeps_its_mark_in_the_ranking_and_the_cost_lines(tmp_path: Path) -> None:
    """SageMaker in eu-west-1 is priced at us-east-1's rates (the nearest region the catalog lists): each of its
    figures says so, in the ranking and in the plan's cost lines; Azure ML's, read where the job runs, does not."""
    away = [*SETTINGS, "sagemaker.region=eu-west-1"]
    overrides = [a for o in ["backends=[sagemaker, azureml]", *away] for a in ("-o", o)]
    shown = cli("submit", str(FIXTURES / "ownscript" / "job.yaml"), "-b", "auto", "--dry-run", *overrides, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    lines = [line.strip() for line in shown.stderr.splitlines()]
    first = next(line for line in lines if line.startswith("1. "))
    second = next(line for line in lines if line.startswith("2. "))
    assert first.startswith("1. azureml: $0.53/h for all nodes") and "~" not in first, first
    assert second.startswith("2. sagemaker: $0.80*/h ~us-east-1 for all nodes"), second
    assert "at most $19.32* ~us-east-1 in limits.max_runtime" in second, second
    assert any(line.startswith("~us-east-1 = the catalog has no price for the size where") for line in lines), lines
    plan = cli("plan", str(FIXTURES / "ownscript" / "job.yaml"), "-b", "sagemaker", *overrides, cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    said = " ".join(plan.stdout.split())  # as printed, wrapped to the terminal
    assert "size: 1 × ml.g6.xlarge, $0.8*/h ~us-east-1 for all nodes" in said, said
    assert "at most $19.32* ~us-east-1: limits.max_runtime" in said, said
