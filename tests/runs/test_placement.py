"""``-b auto``'s ranking and launch, and a recovery chain that moves between backends, decided without a cloud:
the renders are the backends' real (offline) renders; the launches and the checkpoint copy are stubbed (the rigs'
tests in tests/across_backends/test_placement.py do them for real)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudddp.api import Job
from cloudddp.backends.checks import Check, PreflightFailed
from cloudddp.backends.status import QUEUED, Cause, RunState, RunStatus
from cloudddp.errors import CloudDDPError, UserError
from cloudddp.plan import Folder, Plan, Target
from cloudddp.runs import placement, queued, recovery
from cloudddp.runs.database import RunDatabase
from cloudddp.runs.placement import START_SOON_SECONDS, Placement, launch_first
from tests.support.cli import cli
from tests.support.harnesses import TINY, AzureMLHarness, SageMakerHarness

CLOUDS = [
    o
    for o in [*SageMakerHarness.overrides, *AzureMLHarness.overrides]
    if not o.startswith(("sagemaker.instance_type", "azureml.vm_size", "sagemaker.image", "azureml.compute"))
]
GPU_JOB = "jobs/cifar10-resnet18.yaml"


def test_the_backends_are_ranked_by_the_whole_jobs_estimated_cost_before_the_order_of_preference() -> None:
    ranking = Job.load(GPU_JOB, [*CLOUDS, "backends=[azureml, sagemaker]"]).place(checks=False)
    assert [p.backend for p in ranking] == ["sagemaker", "azureml"]
    cheap, dear = ranking
    assert cheap.cost is not None and dear.cost is not None and cheap.cost < dear.cost
    assert cheap.cost == cheap.plan.estimate.total_cost  # type: ignore[union-attr]
    assert f"${cheap.cost:,.2f}{cheap.mark} for the whole job" in cheap.line()  # `*`: EC2's price, a lower bound
    said = cheap.plan.decisions[0]  # type: ignore[union-attr]
    assert said.startswith("placement (-b auto), best first: 1. sagemaker") and "2. azureml" in said


def test_without_estimates_the_order_of_preference_decides_and_one_that_cannot_render_is_set_aside() -> None:
    ranking = Job.load(TINY, [*SageMakerHarness.overrides, "backends=[slurm, azureml, sagemaker]"]).place(checks=False)
    assert [p.backend for p in ranking] == ["slurm", "sagemaker", "azureml"]
    assert [p.usable for p in ranking] == [True, True, False]
    assert "azureml.subscription_id" in ranking[2].refused and ranking[2].line().startswith("azureml: not used")


def test_a_start_later_than_soon_ranks_after_a_dearer_one_that_starts_now() -> None:
    plan = Job.load(TINY).render("local")
    queued = Placement("slurm", 0, plan, cost=1.0, starts_in=START_SOON_SECONDS + 60)
    now = Placement("sagemaker", 1, plan, cost=5.0, starts_in=None)
    unpriced = Placement("azureml", 2, plan, cost=None)
    assert sorted([queued, unpriced, now], key=Placement.rank_key) == [now, unpriced, queued]
    assert "starts in about 1.0 h" in queued.line()


def test_no_backends_named_or_configured_is_a_user_error_that_says_how() -> None:
    with pytest.raises(UserError, match=r"`backends:`") as e:
        Job.load(TINY).place(checks=False)
    assert "docs/configuration.md" in str(e.value)


def test_a_spec_naming_a_backend_twice_or_auto_is_refused_with_the_field() -> None:
    twice = cli("validate", str(TINY), "-o", "backends=[slurm, slurm]")
    assert twice.returncode == 2 and "backends" in twice.stderr and "named twice" in twice.stderr, twice.stderr
    auto = cli("validate", str(TINY), "-o", "backends=[auto]")
    assert auto.returncode == 2 and "'auto' is not one" in auto.stderr, auto.stderr


class Runners:
    """Stands in for the backends' launches: ``refusing`` backends raise what the service would."""

    def __init__(self, refusing: dict[str, Exception]) -> None:
        self.refusing = refusing
        self.launched: list[str] = []

    def open(self, name: str, **_: Any) -> Any:
        outer = self

        class Opened:
            backend = type("B", (), {"name": name})()

            def launch(self, plan: Plan, **_: Any) -> str:
                if name in outer.refusing:
                    raise outer.refusing[name]
                outer.launched.append(name)
                return f"{name}-run"

        return Opened()


def test_a_launch_the_first_backend_refuses_goes_to_the_next_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = Job.load(TINY).render("local")
    ranking = [Placement("sagemaker", 0, plan), Placement("azureml", 1, plan), Placement("slurm", 2, plan)]
    quota = CloudDDPError("SageMaker refused the request (ResourceLimitExceeded): account-level service limit")
    runners = Runners({"sagemaker": quota})
    monkeypatch.setattr(placement.Runner, "open", runners.open)
    placed = launch_first(ranking)
    assert (placed.placement.backend, placed.run_id) == ("azureml", "azureml-run")
    assert [p.backend for p in placed.rest] == ["slurm"]
    assert placed.skipped == [
        "sagemaker (SageMaker refused the request (ResourceLimitExceeded): account-level service limit)"
    ]
    assert "refused at launch: sagemaker (" in placed.note(ranking)


def test_when_every_backend_refuses_the_error_names_each_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = Job.load(TINY).render("local")
    ranking = [Placement("sagemaker", 0, plan), Placement("azureml", 1, refused="azureml.workspace is not set")]
    monkeypatch.setattr(placement.Runner, "open", Runners({"sagemaker": CloudDDPError("no capacity")}).open)
    with pytest.raises(UserError) as e:
        launch_first(ranking)
    assert "azureml: not used: azureml.workspace is not set" in str(e.value)
    assert "sagemaker (no capacity)" in str(e.value)


# -- a chain that moves ------------------------------------------------------------------------------
class Moving:
    """The runners a moving chain opens: each launch records its backend; ``refused`` ones fail preflight."""

    def __init__(self, refused: set[str]) -> None:
        self.refused = refused
        self.launched: list[str] = []
        self.carried: list[tuple[str, str]] = []

    def open(self, name: str, **_: Any) -> Any:
        outer = self

        class Backend:
            def __init__(self) -> None:
                self.name = name
                self.records = self

            def get(self, run_id: str) -> Any:
                return None

            def update(self, run_id: str, info: dict[str, Any]) -> None:
                pass

            def for_attempt(self, plan: Plan, attempt: int) -> Plan:
                return plan

            def avoiding(self, plan: Plan, hosts: list[str]) -> Plan:
                return plan

            def restore(self, state: dict[str, Any], literals: dict[str, str]) -> Plan:
                return Plan.from_state(state, literals)

            def target_of(self, target: Any) -> Target:
                return target if isinstance(target, Target) else Folder.from_fields(target)

        class Opened:
            backend = Backend()

            def launch(self, plan: Plan, *, checks: bool) -> str:
                if checks and name in outer.refused:
                    raise PreflightFailed([Check("quota", False, "0 allowed")])
                outer.launched.append(name)
                return f"{name}-{len(outer.launched) + 1}"

        return Opened()

    def carry(self, source: Any, source_target: Any, dest: Any, dest_target: Any, progress: Any = None) -> str:
        self.carried.append((source.name, dest.name))
        return f"carried ckpt-e0001-s0000023.pt from {source.name} to {dest.name}"


def moving_chain(moves_on: list[str]) -> recovery.Chain:
    plan = Job.load(TINY).render("local")
    others = [{"backend": name, "plan": plan.to_state()} for name in ("slurm", "azureml")]
    return recovery.Chain(
        "run-1",
        "sagemaker",
        "tiny",
        plan.to_state(),
        3,
        [recovery.Attempt(1, "run-1", 0.0, backend="sagemaker")],
        placements=others,
        moves_on=moves_on,
        fallbacks=[{"size": "ml.g6.xlarge", "plan": plan.to_state()}],
        capacity_tries=1,
    )


def ended(cause: Cause) -> RunStatus:
    return RunStatus("run-1", "sagemaker", RunState.FAILED, message=f"{cause.value} said the service", cause=cause)


def test_a_capacity_failure_moves_the_chain_to_the_next_backend_with_its_checkpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    moving = Moving(refused={"slurm"})
    monkeypatch.setattr(recovery.Runner, "open", moving.open)
    monkeypatch.setattr(recovery, "carried_to", moving.carry)
    chain = moving_chain([Cause.CAPACITY.value])
    status = ended(Cause.CAPACITY)
    recovery._record(chain, status)
    recovery.decide(chain, status, moving.open("sagemaker"), {})
    assert moving.launched == ["azureml"] and moving.carried == [("sagemaker", "slurm"), ("sagemaker", "azureml")]
    moved = chain.current
    assert (moved.number, moved.backend) == (2, "azureml")
    assert moved.note == (
        "moved from sagemaker after capacity (capacity said the service); carried ckpt-e0001-s0000023.pt from "
        "sagemaker to azureml"
    )
    assert "skipped slurm (quota: 0 allowed)" in chain.message and chain.placements == []
    assert chain.fallbacks == []  # sizes of the backend it left are not tried on the one it moved to
    assert [a["backend"] for a in chain.summary()] == ["sagemaker", "azureml"]


def test_a_run_queued_past_its_queue_time_is_a_capacity_failure_that_moves_to_the_next_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waiting = RunStatus("run-1", "azureml", RunState.PENDING, details={QUEUED: True})
    assert queued.overdue(waiting, started=time.time() - 10, queue_timeout=5)
    assert not queued.overdue(waiting, started=time.time() - 1, queue_timeout=5)
    assert not queued.overdue(RunStatus("run-1", "slurm", RunState.PENDING), time.time() - 10, 5), "not said queued"
    moving = Moving(refused=set())
    monkeypatch.setattr(recovery.Runner, "open", moving.open)
    monkeypatch.setattr(recovery, "carried_to", moving.carry)
    chain = moving_chain([Cause.CAPACITY.value])
    chain.current.queued_out = True
    cancelled = RunStatus("run-1", "azureml", RunState.CANCELLED, ended_at=1007.0)
    status = queued.as_capacity(cancelled, started=1000.0, queue_timeout=5)
    recovery._record(chain, status)
    recovery.decide(chain, status, moving.open("sagemaker"), {})
    assert moving.launched == ["slurm"] and chain.attempts[0].cause == Cause.CAPACITY.value
    assert "after capacity (Queued for 7s, longer than limits.queue_timeout (5s): cancelled)" in chain.current.note


def test_a_preemption_stays_on_its_backend_unless_the_job_recovers_to_any_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    moving = Moving(refused=set())
    monkeypatch.setattr(recovery.Runner, "open", moving.open)
    monkeypatch.setattr(recovery, "carried_to", moving.carry)
    here = moving.open("sagemaker")
    chain = moving_chain([Cause.CAPACITY.value])
    recovery.decide(chain, ended(Cause.PREEMPTED), here, {})
    assert moving.launched == ["sagemaker"] and chain.current.backend == "sagemaker"
    anywhere = moving_chain([Cause.CAPACITY.value, Cause.PREEMPTED.value])
    recovery.decide(anywhere, ended(Cause.PREEMPTED), here, {})
    assert anywhere.current.backend == "slurm" and "after preempted" in anywhere.current.note


def test_no_backend_left_that_takes_the_job_gives_up_naming_each(monkeypatch: pytest.MonkeyPatch) -> None:
    moving = Moving(refused={"slurm", "azureml"})
    monkeypatch.setattr(recovery.Runner, "open", moving.open)
    monkeypatch.setattr(recovery, "carried_to", moving.carry)
    chain = moving_chain([Cause.CAPACITY.value])
    recovery.decide(chain, ended(Cause.CAPACITY), moving.open("sagemaker"), {})
    assert chain.status == recovery.GAVE_UP and moving.launched == []
    assert chain.message == (
        "not recovered: capacity on sagemaker and no other backend took the job: slurm (quota: 0 allowed), "
        "azureml (quota: 0 allowed)"
    )


def test_submit_auto_dry_run_shows_the_ranking_and_sends_nothing() -> None:
    result = cli(
        "submit",
        GPU_JOB,
        "-b",
        "auto",
        "--dry-run",
        *[a for o in CLOUDS for a in ("-o", o)],
        "-o",
        "backends=[azureml, sagemaker]",
    )
    assert result.returncode == 0, result.stderr
    assert "without preflight checks" in result.stderr
    assert result.stderr.index("1. sagemaker") < result.stderr.index("2. azureml"), result.stderr
    assert "CreateTrainingJob.json" in result.stdout  # the first's request, as it would be sent


def test_a_job_naming_no_backends_is_placed_among_those_the_user_configuration_sets_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings: dict[str, dict[str, str]] = {}
    for override in [*SageMakerHarness.overrides, *AzureMLHarness.overrides]:
        key, value = override.split("=", 1)
        section, name = key.split(".", 1)
        settings.setdefault(section, {})[name] = value
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"backends": ["azureml", "sagemaker"], **settings}))
    config.chmod(0o600)
    monkeypatch.setenv("CLOUDDDP_CONFIG", str(config))
    ranking = Job.load(TINY).place(checks=False)
    assert [(p.backend, p.usable) for p in ranking] == [("azureml", True), ("sagemaker", True)]
    assert ranking[0].plan.request["job"]["compute"].endswith("cpu-cluster")  # type: ignore[union-attr]


def test_recover_to_any_backend_without_backends_is_refused_before_anything_is_launched() -> None:
    result = cli("submit", str(TINY), "-o", "limits.recover_to=any_backend", "-o", "limits.max_recoveries=1")
    assert result.returncode == 2 and "need backends to choose from" in result.stderr, result.stderr
    assert RunDatabase().latest() is None  # no run was launched, to be left without its watcher


def test_a_misspelled_backend_in_the_spec_is_refused_at_load_with_its_line_and_the_closest_name(
    tmp_path: Path,
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(TINY.read_text() + "backends:\n  - slurm\n  - sagemker\n")
    (tmp_path / "train.py").write_text((TINY.parent / "train.py").read_text())
    result = cli("submit", str(job), "-b", "auto", "--dry-run")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    where = f"{job}:{len(TINY.read_text().splitlines()) + 1}: backends:"  # the file and the line of the field
    assert f"{where} 'sagemker' is not a registered backend; did you mean 'sagemaker'?" in result.stderr, result.stderr
