"""Submitting, the one way the command line and the API share (:mod:`cloudddp.runs.submit`): the person is asked
with the plan about to be sent, priced from that plan's own estimate, before anything is sent; under ``-b auto``
again for each backend tried. The renders are the backends' real (offline) renders; the launches are stubbed."""

from __future__ import annotations

from typing import Any

import pytest

from cloudddp.api import Job
from cloudddp.cli.confirm import cost_of
from cloudddp.errors import CloudDDPError, Declined
from cloudddp.plan import Plan
from cloudddp.runs.placement import Placement
from cloudddp.runs.runner import Runner
from cloudddp.runs.submit import submit
from tests.runs.test_placement import CLOUDS, GPU_JOB
from tests.support.harnesses import TINY

OWN_SCRIPT_ON_A_GPU = ["resources.gpus_per_node=1", "resources.interconnect=any"]


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The backends a launch reached (none is sent anywhere); sagemaker refuses, as a capacity error would."""
    sent: list[str] = []

    def launch(self: Runner, plan: Plan, **_: Any) -> str:
        if self.name == "sagemaker":
            raise CloudDDPError("CapacityError: no ml.g5 capacity")
        sent.append(self.name)
        return f"{self.name}-run"

    monkeypatch.setattr(Runner, "launch", launch)
    return sent


def test_a_no_sends_nothing_and_says_so(launches: list[str]) -> None:
    spec = Job.load(GPU_JOB, CLOUDS).spec
    asked: list[Plan] = []
    with pytest.raises(Declined, match="nothing was sent to azureml"):
        submit(spec, "azureml", confirm=lambda plan: asked.append(plan) is not None)
    assert launches == [] and [p.backend for p in asked] == ["azureml"]
    assert asked[0].estimate is not None and asked[0].estimate.total_cost  # what the question showed


def test_auto_asks_again_for_each_backend_it_tries_with_that_backends_own_plan(launches: list[str]) -> None:
    spec = Job.load(GPU_JOB, [*CLOUDS, "backends=[sagemaker, azureml]"]).spec
    plans = {b: Job(spec).render(b) for b in ("sagemaker", "azureml")}
    ranking = [Placement("sagemaker", 0, plans["sagemaker"], cost=1.0), Placement("azureml", 1, plans["azureml"])]
    asked: list[Plan] = []
    submitted = submit(spec, "auto", ranking=ranking, recover=0, confirm=lambda plan: asked.append(plan) is None)
    assert [p.backend for p in asked] == ["sagemaker", "azureml"]  # sagemaker refused the launch: asked again
    assert asked[1] is plans["azureml"] and submitted.plan is plans["azureml"] and launches == ["azureml"]
    asked.clear()
    with pytest.raises(Declined, match="nothing was sent to azureml"):
        submit(spec, "auto", ranking=ranking, recover=0, confirm=lambda plan: plan.backend == "sagemaker")
    assert launches == ["azureml"]  # the first submit's, nothing more


def test_the_question_prices_from_the_plan_never_from_the_catalog_again(monkeypatch: pytest.MonkeyPatch) -> None:
    modelled = Job.load(GPU_JOB, CLOUDS).render("sagemaker")
    own = Job.load(TINY, [*CLOUDS, *OWN_SCRIPT_ON_A_GPU]).render("sagemaker")
    monkeypatch.setattr("cloudddp.catalog.sizing.choose", lambda *a, **k: pytest.fail("the catalog was asked again"))
    est = modelled.estimate
    assert est is not None and est.total_cost is not None and est.size is not None
    cost = cost_of(modelled, 8 * 3600)
    assert cost is not None and (cost.size, cost.nodes, cost.estimate) == (est.size, est.nodes, est.total_cost)
    assert cost.proxy == (est.price_kind == "ec2-proxy") and cost.ceiling is None
    priced = own.estimate  # a script the model cannot time: its size's price, and the most the run may cost
    assert priced is not None and priced.total_cost is None and priced.price_per_hour
    ceiling = cost_of(own, 3600)
    assert ceiling is not None and ceiling.estimate is None and ceiling.ceiling == pytest.approx(priced.price_per_hour)
    assert any(line.startswith("at most ") for line in ceiling.lines())
    assert cost_of(Job.load(TINY).render("local"), 3600) is None  # nothing rented
