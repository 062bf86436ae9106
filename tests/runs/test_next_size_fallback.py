"""limits.recover_to: next_size, decided without a cloud: the sizes rendered at submit, the watcher's choice
among them when a size keeps failing for capacity, and what a plan says. The backend's launch is stubbed
(it records the plan's size, or refuses it at preflight); the rendering is the real SageMaker render."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cloudddp.api import Job
from cloudddp.backends.checks import Check, PreflightFailed
from cloudddp.backends.sagemaker.request import shim_payload
from cloudddp.backends.status import Cause, RunState, RunStatus
from cloudddp.catalog.ranking import NEXT_SIZES, ranked_sizes
from cloudddp.errors import CloudDDPError
from cloudddp.plan import Plan
from cloudddp.runs import recovery
from cloudddp.runs.fallback import plan_fallback
from cloudddp.runs.runner import get_backend
from tests.support.harnesses import TINY, SageMakerHarness

GPU = [
    *SageMakerHarness.overrides,
    "resources.gpus_per_node=1",
    "sagemaker.instance_type=ml.g5.xlarge",
    "limits.recover_to=next_size",
]


class Launcher:
    """Stands in for a backend's launch: each launch gets a run id; ``refused`` sizes fail preflight."""

    def __init__(self, refused: set[str] | None = None) -> None:
        self.refused = refused or set()
        self.clashing: set[str] = set()
        self.launched: list[str] = []
        self.records = self
        self.backend = self  # the runner's backend, too
        self.name = "sagemaker"

    def update(self, run_id: str, info: dict[str, Any]) -> None:
        pass

    def for_attempt(self, plan: Any, attempt: int) -> Any:
        return plan

    def avoiding(self, plan: Any, hosts: list[str]) -> Any:
        return plan

    def restore(self, state: dict[str, Any], literals: dict[str, str]) -> Plan:
        return Plan.from_state(state, literals)

    def launch(self, plan: Any, *, checks: bool) -> str:
        size = plan.request["ResourceConfig"]["InstanceType"]
        if checks and size in self.refused:
            raise PreflightFailed([Check(f"quota for {size}", False, "0 allowed, the job needs 1")])
        if size in self.clashing:
            raise CloudDDPError(f"the service refused {size}: a resource of that name exists with another size")
        self.launched.append(size)
        return f"run-{len(self.launched) + 1}"


def chain_for(overrides: list[str]) -> recovery.Chain:
    job = Job.load(TINY, overrides)
    backend = get_backend("sagemaker")
    fallback = plan_fallback(backend, job.spec)
    plan = backend.render(job.spec)
    return recovery.Chain(
        "run-1",
        "sagemaker",
        plan.job_name,
        plan.to_state(),
        5,
        [recovery.Attempt(1, "run-1", 0.0, size=fallback.size)],
        capacity_tries=job.spec.limits.capacity_tries,
        fallbacks=fallback.plans,
    )


def capacity_failure() -> RunStatus:
    return RunStatus("x", "sagemaker", RunState.FAILED, message="CapacityError: no capacity", cause=Cause.CAPACITY)


def end_attempt(chain: recovery.Chain, status: RunStatus, backend: Launcher) -> None:
    recovery._record(chain, status)
    recovery.decide(chain, status, backend, {})  # type: ignore[arg-type]


def test_the_next_sizes_are_the_rankings_rendered_with_only_the_size_changed() -> None:
    job = Job.load(TINY, GPU)
    backend = get_backend("sagemaker")
    current, ranking = ranked_sizes(backend.size_target(job.spec), job.spec)
    fallback = plan_fallback(backend, job.spec)
    assert current == "ml.g5.xlarge" and current not in ranking
    assert fallback.sizes == ranking[:NEXT_SIZES]
    first = backend.render(job.spec).request
    for entry in fallback.plans:
        request = entry["plan"]["request"]
        assert request["ResourceConfig"]["InstanceType"] == entry["size"]
        assert request["CheckpointConfig"] == first["CheckpointConfig"], "the next size resumes from the checkpoint"
        # The job's name carries a digest of its request, so it differs with the size; nothing else does.
        same = json.dumps({k: v for k, v in readable(request).items() if k != "ResourceConfig"})
        same = same.replace(request["TrainingJobName"], first["TrainingJobName"])
        same = same.replace(request["TrainingJobName"].split("-")[1], first["TrainingJobName"].split("-")[1])
        assert json.loads(same) == {k: v for k, v in readable(first).items() if k != "ResourceConfig"}


def readable(request: dict) -> dict:
    """The request with the launcher's base64 payload decoded (the job's name is inside it)."""
    hyper = {k: v for k, v in request["HyperParameters"].items() if not k.startswith("cloudddp-")}
    return {**request, "HyperParameters": {**hyper, "payload": shim_payload(request["HyperParameters"])}}


def test_same_size_renders_no_fallback_and_a_backend_without_sizes_says_it_has_no_effect() -> None:
    job = Job.load(TINY, [o for o in GPU if not o.startswith("limits.recover_to")])
    assert plan_fallback(get_backend("sagemaker"), job.spec).plans == []
    local = Job.load(TINY, ["limits.recover_to=next_size"]).render("local")
    assert any("has no effect on the local backend" in w for w in local.warnings), local.warnings


def test_the_watcher_stays_on_a_size_until_capacity_tries_then_moves_on() -> None:
    chain = chain_for([*GPU, "limits.capacity_tries=2"])
    backend = Launcher()
    end_attempt(chain, capacity_failure(), backend)
    assert backend.launched == ["ml.g5.xlarge"]
    end_attempt(chain, capacity_failure(), backend)
    nxt = chain.current.size
    assert backend.launched == ["ml.g5.xlarge", nxt] and nxt != "ml.g5.xlarge"
    assert f"on {nxt} after 2 capacity failures on ml.g5.xlarge" in chain.message
    preempted = RunStatus("x", "sagemaker", RunState.FAILED, message="spot", cause=Cause.PREEMPTED)
    end_attempt(chain, preempted, backend)
    assert backend.launched[-1] == nxt, "a failure of another kind retries the same size"


def test_a_size_that_fails_preflight_is_skipped_and_named_and_none_left_gives_up() -> None:
    chain = chain_for([*GPU, "limits.capacity_tries=1"])
    sizes = [f["size"] for f in chain.fallbacks]
    backend = Launcher(refused={sizes[0]})
    end_attempt(chain, capacity_failure(), backend)
    assert backend.launched == [sizes[1]]
    assert f"skipped {sizes[0]} (quota for {sizes[0]}: 0 allowed" in chain.message, chain.message
    backend.refused = set(sizes)
    end_attempt(chain, capacity_failure(), backend)
    assert chain.status == recovery.GAVE_UP
    assert "no next size passes the preflight checks" in chain.message and sizes[2] in chain.message


@pytest.mark.parametrize("value", ["0", "nope"])
def test_bad_recovery_settings_are_user_errors(value: str) -> None:
    from cloudddp.errors import UserError

    field = "limits.capacity_tries" if value == "0" else "limits.recover_to"
    with pytest.raises(UserError, match=field.replace(".", r"\.")):
        Job.load(TINY, [f"{field}={value}"])


def test_a_launch_the_service_refuses_is_said_in_the_chain_and_never_kills_the_watcher() -> None:
    """A next size the service refuses (not a preflight check: e.g. a cluster of that name with another size) is
    skipped with the reason; a same-size retry the service refuses gives up, naming why; neither kills the watcher
    (a crash there would repeat at every restart)."""
    chain = chain_for([*GPU, "limits.capacity_tries=1"])
    sizes = [f["size"] for f in chain.fallbacks]
    backend = Launcher()
    backend.clashing = {sizes[0]}
    end_attempt(chain, capacity_failure(), backend)
    assert backend.launched == [sizes[1]] and chain.status == recovery.WATCHING
    assert f"skipped {sizes[0]} (the service refused {sizes[0]}" in chain.message, chain.message
    backend.clashing = {sizes[1]}
    preempted = RunStatus("x", "sagemaker", RunState.FAILED, message="spot", cause=Cause.PREEMPTED)
    end_attempt(chain, preempted, backend)
    assert chain.status == recovery.GAVE_UP, chain.message
    assert chain.message.startswith("not recovered: attempt 3 could not launch: the service refused"), chain.message
