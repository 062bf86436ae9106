"""What a SageMaker job cost, from DescribeTrainingJob's times against moto (extended to report them as SageMaker
does), and the budget watch stopping a job whose spend reaches resources.max_cost."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest

from cloudddp.api import Run
from cloudddp.backends.plugins import load_spec
from cloudddp.backends.sagemaker import SageMakerBackend
from cloudddp.backends.status import RunState
from cloudddp.catalog import find
from cloudddp.runs.database import RunDatabase
from cloudddp.runs.runner import Runner
from cloudddp.spec.model import JobSpec
from tests.support.aws_emulator import aws_environment, put_logs, set_status
from tests.support.cli import ROOT, cli
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow
JOB = ROOT / "jobs" / "cifar10-smddp.yaml"  # the shared script, 2 × ml.p4d.24xlarge, managed spot
P4D = find("ml.p4d.24xlarge")
assert P4D is not None and P4D.price_per_hour is not None
PRICE = P4D.price_per_hour


@pytest.fixture(autouse=True)
def aws_env(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in aws_environment(moto_url).items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


def backend(token: str) -> SageMakerBackend:
    return SageMakerBackend(records=RunDatabase(), poll_seconds=0.1, token=f"{token}{time.time_ns() % 10**8}")


def spec(*extra: str) -> JobSpec:
    return load_spec(JOB, ["sagemaker.bucket=cloudddp-cost", "sagemaker.role=arn:aws:iam::123456789012:role/R", *extra])


def epoch_line(epoch: int, seconds: float) -> str:
    """Rank 0's metric line as the container writes it, after the launcher's rank prefix."""
    record = {"epoch": epoch, "step": epoch * 12, "time": 1.0, "epoch_time": seconds}
    return "[rank0]:CLOUDDDP_METRIC " + json.dumps(record)


def test_the_bill_of_a_finished_spot_job_is_its_billable_time_and_shows_the_saving() -> None:
    b = backend("bill")
    plan = b.render(spec())
    assert plan.estimate is not None and plan.request["EnableManagedSpotTraining"] is True
    name = b.launch(plan, checks=False)
    started = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=30)
    set_status(name, "InProgress", "Training", at=started)
    put_logs(name, "algo-1", [epoch_line(e, s) for e, s in ((1, 3.0), (2, 1.2), (3, 1.5), (4, 1.32))], 0)
    set_status(name, "Completed", "Completed", spot_savings=0.7)
    described = boto3.client("sagemaker").describe_training_job(TrainingJobName=name)
    billable, training = described["BillableTimeInSeconds"], described["TrainingTimeInSeconds"]
    assert 1800 <= training <= 1830 and billable == pytest.approx(training * 0.3, abs=1)

    result = cli("cost", name, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    actual = report["actual"]
    assert plan.estimate is not None and report["estimate"] == plan.estimate.to_dict()
    assert report["estimated_cost"] == plan.estimate.total_cost
    assert actual["final"] and actual["billed_s"] == billable and actual["nodes"] == 2
    assert actual["cost"] == pytest.approx(billable * 2 * PRICE / 3600)
    assert actual["savings"] == pytest.approx(1 - billable / training)
    assert report["difference"] == pytest.approx(actual["cost"] / plan.estimate.total_cost - 1)
    sources = {f["name"]: f["source"] for f in actual["figures"]}
    assert sources["billable time per instance"] == "DescribeTrainingJob BillableTimeInSeconds"
    assert "lower bound" in sources["price per node"]  # the catalog's EC2 price, said to be one
    text = cli("cost", name).stdout
    for words in ("estimate at submit", "BillableTimeInSeconds", "spot savings", f"{PRICE * 2:,.2f}"):
        assert words in text, text

    # The run's measured step time (0.11 s: the median of epochs 2-4) now estimates the same job on this size.
    assert report["measured"]["step_s"] == pytest.approx(0.11) and report["measured"]["key"].endswith("|2x8")
    again = backend("again").render(
        spec("code.args=[--dataset, cifar10, --model, resnet18, --epochs, '10', --batch-size, '256', --lr, '0.1']")
    )
    assert again.estimate is not None and again.estimate.step_s == pytest.approx(0.11)
    assert again.estimate.steps == 120 and any(f"measured on run {name}" in d for d in again.decisions)


def test_while_a_job_runs_its_spend_counts_from_training_start() -> None:
    b = backend("running")
    name = b.launch(b.render(spec()), checks=False)
    starting = b.bill(name)
    assert starting is not None and not starting.final and starting.cost == 0
    assert "no TrainingStartTime" in starting.figures[1].source
    set_status(
        name, "InProgress", "Training", at=datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=10)
    )
    running = b.bill(name)
    assert running is not None and not running.final
    assert running.billed_s == pytest.approx(600, abs=15)
    assert running.cost == pytest.approx(running.billed_s * 2 * PRICE / 3600)
    assert any("saving shows when it ends" in n for n in running.notes)  # a spot job: not yet known


def watch_looks(log: str) -> int:
    """How many times the budget watch has looked at the bill (one log line each)."""
    return sum(" of $20.00" in line for line in Path(log).read_text().splitlines()) if Path(log).exists() else 0


def test_the_budget_watch_process_stops_a_job_whose_spend_reaches_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUDDDP_BUDGET_POLL", "0.2")
    b = backend("budget")
    plan = b.render(spec("resources.max_cost=20"))
    assert not any("max_cost" in w for w in plan.warnings)  # the estimate is under it; SageMaker enforces it
    name = Runner(b).launch(plan, checks=False)  # starts the detached watch
    watch = RunDatabase().get(name).info["budget"]  # type: ignore[union-attr]
    assert watch["watch_pid"] > 0 and watch["poll_s"] == 0.2
    looks = watch_looks(watch["log"])
    wait_until(lambda: watch_looks(watch["log"]) >= looks + 2, timeout=30)  # it has looked at the bill twice
    assert b.status(name).state is RunState.STARTING  # nothing billed yet: the watch lets it start
    # 20 minutes of 2 instances are about $14.6; stopping costs the 120 s grace on both (~$1.5): under $20.
    set_status(
        name, "InProgress", "Training", at=datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=20)
    )
    looks = watch_looks(watch["log"])
    wait_until(lambda: watch_looks(watch["log"]) >= looks + 2, timeout=30)  # and twice more at $14.6
    assert b.status(name).state is RunState.RUNNING  # under the budget: left running
    # Ten more minutes' worth ($7.32) reach it: the watch stops the job (StopTrainingJob: SIGTERM, then the grace).
    set_status(
        name, "InProgress", "Training", at=datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=30)
    )
    job = boto3.client("sagemaker")
    deadline = time.monotonic() + 60
    while b.status(name).state is not RunState.CANCELLED and time.monotonic() < deadline:
        time.sleep(0.2)
    assert job.describe_training_job(TrainingJobName=name)["TrainingJobStatus"] == "Stopped"
    deadline = time.monotonic() + 10
    while "stopped_at_cost" not in RunDatabase().get(name).info["budget"] and time.monotonic() < deadline:  # type: ignore[union-attr]
        time.sleep(0.1)
    outcome = RunDatabase().get(name).info["budget"]  # type: ignore[union-attr]
    assert outcome["stopped_at_cost"] == pytest.approx(1800 * 2 * PRICE / 3600, rel=0.02)
    assert outcome["stop_cost"] == pytest.approx(120 * 2 * PRICE / 3600, abs=1e-4)
    report = json.loads(cli("cost", name, "--json").stdout)
    assert report["max_cost"] == 20 and report["budget"]["message"].startswith("stopped: spend $")


def wait_for(predicate: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.2)
    raise TimeoutError("condition not met in time")


def test_under_recovery_the_budget_counts_every_attempt_and_a_budget_stop_ends_the_recovery(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(JOB.read_text().replace("dir: ../src_train", f"dir: {ROOT / 'src_train'}"))
    result = cli(
        "submit",
        str(job),
        "-b",
        "sagemaker",
        "-y",
        "-o",
        "sagemaker.bucket=cloudddp-cost",
        "-o",
        "sagemaker.role=arn:aws:iam::123456789012:role/R",
        "-o",
        "resources.max_cost=20",
        "--recover",
        "3",
        "--detach",
        "--quiet",
        "--skip-checks",
        env={"CLOUDDDP_RECOVERY_POLL": "0.3", "CLOUDDDP_BUDGET_POLL": "0.2"},
    )
    assert result.returncode == 0, result.stderr
    run = Run.attach(result.stdout.strip())
    first = run.chain.current.run_id  # type: ignore[union-attr]
    # 20 minutes on 2 instances ($14.64), then capacity is lost: recovery launches attempt 2.
    set_status(
        first,
        "InProgress",
        "Training",
        at=datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=20),
    )
    set_status(first, "Failed", "Failed", reason="CapacityError: Unable to provision requested ML compute capacity.")
    second = wait_for(lambda: len(run.chain.attempts) == 2 and run.chain.current.run_id)  # type: ignore[union-attr]
    # Two minutes of attempt 2 ($1.46) + attempt 1 + stopping ($1.46) stay under $20; ten minutes ($7.32) do not.
    set_status(
        second,
        "InProgress",
        "Training",
        at=datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=2),
    )
    log = wait_for(lambda: RunDatabase().get(second).info.get("budget", {}).get("log"))  # type: ignore[union-attr]
    looks = watch_looks(log)
    wait_for(lambda: watch_looks(log) >= looks + 2)  # attempt 2's watch has looked at the bill twice since
    assert run.backend.status(second).state is RunState.RUNNING
    set_status(
        second,
        "InProgress",
        "Training",
        at=datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=10),
    )
    wait_for(lambda: run.backend.status(second).state is RunState.CANCELLED)
    status = wait_for(lambda: (s := run.status()).details.get("recovery") != "watching" and s)
    assert status.state is RunState.CANCELLED and len(status.details["attempts"]) == 2  # not resubmitted
    outcome = wait_for(lambda: RunDatabase().get(second).info["budget"].get("message"))  # type: ignore[union-attr]
    assert "by earlier attempts" in outcome
    # the amount it stopped at: attempt 1's 20 minutes and attempt 2's 10, each counted once, on 2 instances
    stopped = RunDatabase().get(second).info["budget"]["stopped_at_cost"]  # type: ignore[union-attr]
    assert stopped == pytest.approx((1200 + 600) * 2 * PRICE / 3600, rel=0.02), outcome

    report = run.cost()
    assert [a["run_id"] for a in report.attempts] == [first, second]
    assert report.attempts[0]["cost"] == pytest.approx(1200 * 2 * PRICE / 3600, rel=0.01)
    assert report.actual_cost == pytest.approx(sum(a["cost"] for a in report.attempts))
    assert report.bill is not None and report.bill.size == "ml.p4d.24xlarge"  # the current attempt's figures
