"""What an Azure ML job cost, from the run history's start and end, the nodes it held and the idle scale-down it
caused, through the real azure-ai-ml SDK against the offline workspace; and the budget watch cancelling a job.

Most tests drive the backend in this process, and read the report ``cloudddp cost`` prints through the same
:class:`cloudddp.api.Run` and text renderer; the detached budget watch runs as ``cloudddp submit`` starts it, in its own
process, against the workspace served over HTTP."""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from cloudddp.api import Run
from cloudddp.backends.plugins import load_spec
from cloudddp.backends.status import RunState
from cloudddp.catalog import find
from cloudddp.cli.cmd_runs import cost_text
from cloudddp.runs.budget import watch
from cloudddp.runs.database import RunDatabase
from tests.support.azure_rig import (
    WS_PATH,
    WorkspaceModel,
    serve,
    served_environment,
)
from tests.support.azure_rig import (
    rig_backend as backend,
)
from tests.support.cli import ROOT, cli
from tests.support.mlflow_server import MlflowServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow
JOB = ROOT / "jobs" / "cifar10-azureml.yaml"  # the shared script, 2 × Standard_ND96asr_v4, 300 s idle scale-down
ND96 = find("Standard_ND96asr_v4")
assert ND96 is not None and ND96.price_per_hour is not None
PRICE = ND96.price_per_hour


def ago(minutes: float) -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=minutes)


def test_the_bill_is_the_run_time_on_every_node_plus_the_idle_scale_down(
    model: WorkspaceModel, mlflow_server: MlflowServer
) -> None:
    model.mlflow = (
        mlflow_server  # the step time comes from the job's metrics: its metric lines, as it logged none to MLflow
    )
    b = backend(model, "bill")
    plan = b.render(load_spec(JOB))
    assert plan.estimate is not None and plan.estimate.idle_s == 300
    name = b.launch(plan)
    queued = b.bill(name)
    assert queued is not None and queued.cost == 0 and "no startTimeUtc" in queued.figures[1].source

    model.set_job_status(name, "Running", at=ago(60))
    running = b.bill(name)
    assert running is not None and not running.final and running.pending_s == 300  # comes after the end
    assert running.billed_s == pytest.approx(3600, abs=15)
    model.write_log(
        name,
        0,
        "".join(
            f'CLOUDDDP_METRIC {{"epoch":{e},"step":{e * 12},"epoch_time":{s}}}\n'
            for e, s in ((1, 2.0), (2, 0.6), (3, 0.72))
        ),
    )
    model.set_job_status(name, "Completed")

    report = Run(name, b).cost()
    bill = report.bill
    assert bill is not None and bill.final and bill.nodes == 2 and bill.size == "Standard_ND96asr_v4"
    assert bill.billed_s == pytest.approx(3600 + 300, abs=15)  # run history start → end, then idle before scale-down
    assert bill.cost == pytest.approx(bill.billed_s * 2 * PRICE / 3600)
    assert bill.resource_unit == "GPU-hours" and bill.resource_hours == pytest.approx(bill.billed_s * 16 / 3600)
    sources = " | ".join(f.source for f in bill.figures)
    assert "endTimeUtc − startTimeUtc" in sources and "idle_time_before_scale_down" in sources
    assert any("allocation" in n for n in bill.notes)  # what the run history does not report, said
    assert report.estimate == plan.estimate
    assert report.difference == pytest.approx(bill.cost / plan.estimate.total_cost - 1)
    assert report.measured is not None and report.measured["step_s"] == pytest.approx(0.055)  # epochs 2-3

    console = Console(width=200, record=True)
    console.print(cost_text(report))
    text = console.export_text()
    for words in ("estimate at submit", f"{plan.estimate.total_cost:,.2f}", "idle before scale-down", "GPU-hours"):
        assert words in text, text


def test_the_budget_watch_cancels_a_run_whose_spend_reaches_the_budget(model: WorkspaceModel) -> None:
    b = backend(model, "budget")
    plan = b.render(load_spec(JOB, ["resources.max_cost=58"]))
    assert not any("max_cost" in w for w in plan.warnings)
    name = b.launch(plan)
    model.set_job_status(name, "Running", at=ago(50))  # $45.3 so far; stopping adds 30 s + 300 s idle: $5.0
    polls: list[float] = []

    def later(seconds: float) -> None:  # the watch's clock: the run goes on between two polls
        polls.append(seconds)
        assert len(polls) < 5, "the watch did not stop the run"
        model.set_job_status(name, "Running", at=ago(50 + 5 * len(polls)))

    outcome = watch(b, name, 58.0, poll=0.01, sleep=later)
    assert model.cancel_requests == {name: 1}
    wait_until(lambda: b.status(name).state is RunState.CANCELLED, timeout=30)
    assert len(polls) == 2  # at 55 minutes $49.9 + $5.0 is under $58; at 60, $54.4 + $5.0 reaches it
    assert outcome["stopped_at_cost"] == pytest.approx(3600 * 2 * PRICE / 3600, rel=0.01)
    assert outcome["stop_cost"] == pytest.approx(330 * 2 * PRICE / 3600, abs=1e-3)
    assert RunDatabase().get(name).info["budget"]["message"].startswith("stopped: spend $")  # type: ignore[union-attr]


@pytest.fixture()
def served(model: WorkspaceModel, monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkspaceModel]:
    """The workspace over HTTP, for the CLI and the detached budget watch it starts (both other processes)."""
    with serve(model) as url:
        for key, value in {**served_environment(url, model), "CLOUDDDP_BUDGET_POLL": "0.2"}.items():
            monkeypatch.setenv(key, value)
        yield model


def watch_looks(log: str) -> int:
    """How many times the budget watch has looked at the bill (one log line each)."""
    return sum(" of $58.00" in line for line in Path(log).read_text().splitlines()) if Path(log).exists() else 0


@pytest.mark.timeout(240)
def test_the_detached_budget_watch_started_by_submit_cancels_the_job_on_the_workspace(served: WorkspaceModel) -> None:
    """The watch as a user gets it: started by ``cloudddp submit --detach``, in its own process, reading the bill
    from the workspace over HTTP until the spend and the cost of stopping reach the budget, then cancelling."""
    result = cli(
        "submit", str(JOB), "-b", "azureml", "-o", "resources.max_cost=58", "-o", "name=budget-az", "--detach", "-y"
    )
    assert result.returncode == 0, result.stderr
    found = re.search(r"submitted (\S+)", result.stderr)
    assert found, result.stderr
    name = found.group(1)
    watch = RunDatabase().get(name).info["budget"]  # type: ignore[union-attr]
    assert watch["watch_pid"] > 0 and watch["poll_s"] == 0.2
    wait_until(lambda: watch_looks(watch["log"]) >= 2, timeout=60)  # it has looked at the bill twice
    assert served.jobs[name]["properties"]["status"] == "Queued"  # nothing billed yet: left alone

    served.set_job_status(name, "Running", at=ago(50))  # $45.3 so far; stopping adds 30 s + 300 s idle: $5.0
    looks = watch_looks(watch["log"])
    wait_until(lambda: watch_looks(watch["log"]) >= looks + 2, timeout=60)  # and twice more at $50.3
    assert served.jobs[name]["properties"]["status"] == "Running"  # under the budget: left running
    assert not any(path.endswith("/cancel") for _, path in served.calls)

    served.set_job_status(name, "Running", at=ago(60))  # $54.4 + $5.0 reach $58: the watch cancels the job
    wait_until(lambda: served.jobs[name]["properties"]["status"] == "Canceled", timeout=60)
    assert [path for method, path in served.calls if path.endswith("/cancel")] == [f"{WS_PATH}/jobs/{name}/cancel"]
    outcome = wait_until(
        lambda: (
            RunDatabase().get(name).info["budget"].get("stopped_at_cost") and RunDatabase().get(name).info["budget"]
        ),
        timeout=30,
    )  # type: ignore[union-attr]
    assert outcome["stopped_at_cost"] == pytest.approx(3600 * 2 * PRICE / 3600, rel=0.02)
    assert outcome["stop_cost"] == pytest.approx(330 * 2 * PRICE / 3600, abs=1e-3)
    report = json.loads(cli("cost", name, "--json").stdout)
    assert report["max_cost"] == 58 and report["budget"]["message"].startswith("stopped: spend $")
    assert json.loads(cli("status", name, "--json").stdout)["state"] == "cancelled"
