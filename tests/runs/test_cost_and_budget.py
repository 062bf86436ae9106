"""The real bill after a run, measured step times feeding the next estimate, budgets, and estimates that say
what they do not know. The clouds' bills are tested against their emulators in tests/backends/sagemaker and
tests/backends/azureml."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cloudddp.api import Job, Run
from cloudddp.catalog import find
from cloudddp.catalog.bill import Bill
from cloudddp.catalog.stepstore import Measured, StepStore, measure, size_key
from cloudddp.observe.metrics import MetricRecord
from cloudddp.runs.budget import over_budget, stop_cost
from cloudddp.spec.model import is_shared_script, job_key
from tests.support.cli import FIXTURES, ROOT, cli

TINY = FIXTURES / "tinyjob" / "job.yaml"
SMDDP = ROOT / "jobs" / "cifar10-smddp.yaml"
SM = ["sagemaker.region=us-east-1", "sagemaker.role=arn:aws:iam::123456789012:role/R", "sagemaker.bucket=b"]


def epoch_end(epoch: int, step: int, seconds: float) -> MetricRecord:
    return MetricRecord(
        step=step, epoch=epoch, time=None, values={"epoch_time": seconds, "images_per_sec": 640 / seconds}
    )


# -- measuring a finished run ---------------------------------------------------------------------------------


def test_the_step_time_is_the_median_epoch_time_per_step_after_the_warm_up_epoch() -> None:
    records = [
        MetricRecord(5, 1, None, {"train_loss": 1.0}),
        epoch_end(1, 10, 9.0),
        epoch_end(2, 20, 4.0),
        epoch_end(3, 30, 5.0),
        epoch_end(4, 40, 4.4),
    ]
    m = measure(records)
    assert isinstance(m, Measured)
    assert m.step_s == pytest.approx(0.44)  # median of 0.40, 0.50, 0.44; the first epoch's 0.9 is warm-up
    assert (m.steps, m.steps_per_epoch, m.epochs) == (40, 10, 4)
    assert "warm-up" in m.how


def test_a_resumed_run_counts_only_the_epochs_it_ran_whole() -> None:
    m = measure([epoch_end(3, 30, 50.0), epoch_end(4, 40, 4.0), epoch_end(5, 50, 6.0)])
    assert isinstance(m, Measured)
    assert m.step_s == pytest.approx(0.6)  # epochs 4 and 5 (0.4, 0.6): the warm-up one left out
    assert m.steps is None  # it did not run all 50 steps


def test_without_epoch_time_the_wall_time_per_step_is_kept_as_an_upper_bound() -> None:
    m = measure([MetricRecord(s, s, None, {"loss": 1.0}) for s in (1, 2, 3)], ran_s=9.0)
    assert isinstance(m, Measured) and m.step_s == 3.0 and m.steps == 3 and "upper bound" in m.how
    assert (
        measure([MetricRecord(None, 1, None, {"loss": 1.0})], ran_s=9.0)
        == "the run reported no metric record with a step number"
    )


def test_the_job_key_ignores_epochs_and_nothing_else() -> None:
    base = Job.load(TINY).spec
    assert job_key(base) == job_key(Job.load(TINY, ["code.args=[--epochs, 30]"]).spec)
    assert job_key(base) != job_key(Job.load(TINY, ["code.args=[--epochs, 3, --sleep, 1]"]).spec)


def test_the_store_keeps_the_newest_measurement_of_each_size_and_shape() -> None:
    store = StepStore()
    store.put(size_key("job-1", "ml.g5.xlarge", 1, 1), Measured(0.5, "first", run_id="a"))
    store.put(size_key("job-1", "ml.g5.xlarge", 1, 1), Measured(0.4, "second", run_id="b"))
    store.put(size_key("job-1", "ml.p4d.24xlarge", 2, 8), Measured(0.1, "other shape", run_id="c"))
    found = store.for_shape("job-1", 1, 1)
    assert list(found) == ["ml.g5.xlarge"] and found["ml.g5.xlarge"].run_id == "b"


# -- what the estimate knows -----------------------------------------------------------------------------------


def test_the_shared_script_is_recognised_by_its_marker_not_by_its_name(tmp_path: Path) -> None:
    assert is_shared_script(Job.load(ROOT / "jobs" / "digits-local.yaml").spec)
    assert not is_shared_script(Job.load(TINY).spec)  # also called train.py
    shutil.copy(ROOT / "src_train" / "train.py", tmp_path / "main.py")
    (tmp_path / "job.yaml").write_text("name: copy\ncode: {dir: ., entry: main.py}\n")
    assert is_shared_script(Job.load(tmp_path / "job.yaml").spec)


def test_a_script_cloudddp_does_not_know_gets_only_its_sizes_price_and_is_asked_for_the_figures() -> None:
    plan = Job.load(TINY, [*SM, "resources.gpus_per_node=1"]).render("sagemaker")
    assert plan.estimate is not None and plan.estimate.size is not None and plan.estimate.price_per_hour
    assert plan.estimate.total_cost is None and plan.estimate.step_s is None
    [warning] = [w for w in plan.warnings if w.startswith("cost: no estimate")]
    assert "not cloudddp's shared training script" in warning
    assert "resources.step_time" in warning and "resources.steps" in warning
    half = Job.load(TINY, [*SM, "resources.gpus_per_node=1", "resources.step_time=0.5"]).render("sagemaker")
    assert half.estimate is not None and half.estimate.total_cost is None
    assert any("give resources.steps" in w for w in half.warnings)


def test_with_a_step_time_and_steps_the_estimate_uses_them_on_every_size() -> None:
    plan = Job.load(TINY, [*SM, "resources.gpus_per_node=1", "resources.step_time=0.5", "resources.steps=1000"]).render(
        "sagemaker"
    )
    est = plan.estimate
    assert est is not None and est.step_s == 0.5 and est.steps == 1000 and est.training_s == 500
    assert est.step_basis.startswith("resources.step_time")
    size = plan.request["ResourceConfig"]["InstanceType"]
    sku = find(size)
    assert sku is not None and sku.price_per_hour
    assert est.total_cost == pytest.approx(est.billed_s * sku.price_per_hour / 3600, rel=1e-4)
    assert any("step time 0.5 s from resources.step_time" in d for d in plan.decisions)


def test_a_measured_step_time_replaces_the_model_on_its_size_and_shape_and_the_plan_says_so() -> None:
    spec = Job.load(SMDDP, SM).spec
    modelled = Job(spec).render("sagemaker").estimate
    assert modelled is not None and modelled.step_basis == "model"
    StepStore().put(
        size_key(job_key(spec), "ml.p4d.24xlarge", 2, 8),
        Measured(0.05, "median over 3 epoch(s)", run_id="run-before", steps_per_epoch=12, epochs=4),
    )
    plan = Job(spec).render("sagemaker")
    est = plan.estimate
    assert est is not None and est.step_s == 0.05 and est.step_basis.startswith("measured on run run-before")
    assert est.steps == 12 * 30  # steps per epoch measured, times this job's 30 epochs
    assert any("measured on run run-before" in d for d in plan.decisions)
    other_shape = Job.load(SMDDP, [*SM, "resources.nodes=1"]).render("sagemaker").estimate
    assert other_shape is not None and other_shape.step_basis == "model"


# -- budgets ---------------------------------------------------------------------------------------------------


def test_render_warns_when_the_estimate_is_over_the_budget_and_where_it_is_not_enforced() -> None:
    estimate = Job.load(SMDDP, SM).render("sagemaker").estimate
    assert estimate is not None
    total = estimate.total_cost
    over = Job.load(SMDDP, [*SM, f"resources.max_cost={total / 2}"]).render("sagemaker")
    assert any(f"estimated cost ${total:,.2f} is over the budget" in w for w in over.warnings)
    under = Job.load(SMDDP, [*SM, f"resources.max_cost={total * 2}"]).render("sagemaker")
    assert not any("max_cost" in w for w in under.warnings)  # enforced on SageMaker: nothing to say
    local = Job.load(TINY, ["resources.max_cost=5"]).render("local")
    assert any("not enforced by the local backend" in w and "no price" in w for w in local.warnings)


def test_the_budget_counts_what_stopping_still_costs() -> None:
    bill = Bill(
        final=False, size="x", nodes=2, processes_per_node=8, billed_s=500, price_per_hour=36.0, cost=9.0, pending_s=300
    )
    assert stop_cost(bill, 120) == pytest.approx(36 * 420 / 3600)  # the grace and the idle scale-down, both nodes
    assert over_budget(bill, 13.2, 120) and not over_budget(bill, 13.3, 120)
    assert not over_budget(
        Bill(
            final=False, size="local:cpu", nodes=1, processes_per_node=2, billed_s=1e6, price_per_hour=None, cost=None
        ),
        0.01,
        30,
    )  # no price: nothing to enforce


def test_max_cost_is_a_positive_amount() -> None:
    bad = cli("validate", str(TINY), "-o", "resources.max_cost=-3")
    assert bad.returncode == 2 and "resources.max_cost" in bad.stderr and "Traceback" not in bad.stderr


# -- a finished local run --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_cost_of_a_finished_local_run_and_its_step_time_feeds_the_next_estimate() -> None:
    digits = ROOT / "jobs" / "digits-local.yaml"
    args = "code.args=[--dataset, digits, --model, cnn, --epochs, '3']"
    submitted = cli("submit", str(digits), "-o", args, "-o", "resources.step_time=0.05", "--quiet", timeout=300)
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip().splitlines()[0]

    report = json.loads(cli("cost", run_id, "--json").stdout)
    actual, estimate = report["actual"], report["estimate"]
    assert report["state"] == "succeeded" and actual["final"] and actual["size"] == "local:cpu"
    assert actual["cost"] is None and actual["resource_unit"] == "CPU-hours" and actual["resource_hours"] > 0
    sources = {f["name"]: f["source"] for f in actual["figures"]}
    assert "getrusage" in sources["CPU time"] and "started_at" in sources["processes ran"]
    steps = 1437 / (64 * 2) * 3  # the digits training set over a global batch of 2 × 64, 3 epochs
    assert estimate["step_s"] == 0.05 and estimate["training_s"] == pytest.approx(steps * 0.05)
    measured = report["measured"]
    assert measured["key"].endswith("|local:cpu|1x2") and 0 < measured["step_s"] < actual["ran_s"]
    assert measured["steps"] == 33 and measured["steps_per_epoch"] == 11  # the script's own step numbers

    text = cli("cost", run_id).stdout
    assert "estimate at submit" in text and "CPU-hours" in text and "getrusage" in text
    again = Job.load(digits, ["code.args=[--dataset, digits, --model, cnn, --epochs, '6']"]).render("local")
    assert again.estimate is not None and again.estimate.step_s == pytest.approx(measured["step_s"], abs=1e-6)
    assert again.estimate.steps == 66  # 11 measured steps per epoch × 6 epochs
    assert any(f"measured on run {run_id}" in d for d in again.decisions)
    assert Run.attach(run_id).cost().measured == measured  # kept once


def test_a_backend_without_figures_says_so_with_the_reason() -> None:
    from tests.backends.test_plugins import TOY_JOB, WITH_PLUGIN

    plain = ("-o", "toy.flavour=plain")  # the toy bills only its fancy runs
    assert cli("submit", str(TOY_JOB), "-b", "toy", *plain, "--detach", "--quiet", env=WITH_PLUGIN).returncode == 0
    result = cli("cost", "toy-job", env=WITH_PLUGIN)
    assert result.returncode == 0, result.stderr
    assert "reports no figures about what a run cost" in result.stdout
    assert json.loads(cli("cost", "toy-job", "--json", env=WITH_PLUGIN).stdout)["actual"] is None
    rows = {r["name"]: r for r in json.loads(cli("backends", "--json", env=WITH_PLUGIN).stdout)}
    assert (
        rows["toy"]["enforces_max_cost"] is False
        and "cannot report what a run spends" in rows["toy"]["max_cost_not_enforced"]
    )
    assert rows["sagemaker"]["enforces_max_cost"] and rows["azureml"]["enforces_max_cost"]
