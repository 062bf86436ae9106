"""``-b auto`` wired end to end, without a cloud: each backend's own answers go in at the hooks that give them, and
everything from there is cloudddp's real code — the survey, the ranking, ``Job.submit("auto")``'s launch, the
recovery chain it starts and the moves the watcher's :func:`~cloudddp.runs.recovery.decide` makes.

The backends are the real ones (their offline renders, their launch and preflight verbs); stubbed are only their
hooks that would reach a service: ``_preflight`` answers the checks (one answer per question, in order),
``_launch`` takes the job or raises what the service would (SageMaker's ``ClientError``, translated by the
backend), and Slurm's start estimate comes from an ``sbatch`` on PATH that answers ``--test-only`` as Slurm does
(the controller's local time, no zone), read by the backend's own code. The watcher process is not spawned and
the checkpoint copy between stores is recorded, not made (tests/runs/test_carry.py makes it)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from cloudddp.api import Job, Run
from cloudddp.backends.base import Launched
from cloudddp.backends.checks import Check
from cloudddp.backends.plugins import backend_class
from cloudddp.backends.status import Cause, RunState, RunStatus
from cloudddp.cli.placing import placement_moves
from cloudddp.plan import Plan
from cloudddp.runs import recovery
from cloudddp.runs.runner import Runner
from tests.support.cli import FIXTURES
from tests.support.clock import time_zone
from tests.support.harnesses import AzureMLHarness, SageMakerHarness

BACKENDS = ("sagemaker", "azureml", "slurm")
CLOUDS = [  # the harnesses' settings, the sizes left to the job
    o
    for o in [*SageMakerHarness.overrides, *AzureMLHarness.overrides]
    if not o.startswith(("sagemaker.instance_type", "azureml.vm_size", "sagemaker.image", "azureml.compute"))
]
GPU_JOB = "jobs/cifar10-resnet18.yaml"
TINY = FIXTURES / "tinyjob" / "job.yaml"
SBATCH = """#!/bin/sh
# Slurm's sbatch as -b auto asks it: --test-only with the script on stdin, answered on stderr.
cat > "{tmp}/asked.sbatch"
echo "sbatch: Job 4242 to start at $(cat "{tmp}/start") using 1 processors on nodes n1 in partition debug" >&2
"""
QUOTA = "account-level service limit 'ml.p3.2xlarge for training job usage' is 0 Instances"


class Services:
    """What the services answer: preflight checks (``refuse``: a failed answer for each of a backend's next
    questions, then they pass), launches (``refuse_launch``: the service's error) and Slurm's scheduler
    (``slurm_starts_in``); what was launched and carried, in order."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp = tmp_path
        self.refused: dict[str, list[list[Check]]] = {}
        self.refuse_launch: dict[str, Exception] = {}
        self.launched: list[str] = []
        self.carried: list[tuple[str, str]] = []
        tools = tmp_path / "bin"
        tools.mkdir()
        (tools / "sbatch").write_text(SBATCH.format(tmp=tmp_path))
        (tools / "sbatch").chmod(0o755)
        monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
        for name in BACKENDS:
            monkeypatch.setattr(backend_class(name), "_preflight", self._checks(name))
            monkeypatch.setattr(backend_class(name), "_launch", self._launch(name))
        monkeypatch.setattr(recovery, "spawn_watcher", lambda chain, literals=None: None)
        monkeypatch.setattr(recovery, "carried_to", self._carry)

    def refuse(self, name: str, *details: str, check: str = "quota") -> None:
        self.refused[name] = [[Check(check, False, detail)] for detail in details]

    def slurm_starts_in(self, seconds: float) -> None:
        """The scheduler's answer: a start ``seconds`` from now, in this machine's local time (the controller's)."""
        (self.tmp / "start").write_text(time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + seconds)))

    @property
    def asked_script(self) -> str:
        return (self.tmp / "asked.sbatch").read_text()

    def _checks(self, name: str) -> Any:
        def preflight(backend: Any, plan: Plan) -> list[Check]:
            answers = self.refused.get(name) or []
            return answers.pop(0) if answers else [Check("quota", True, "room for the job")]

        return preflight

    def _launch(self, name: str) -> Any:
        def launch(backend: Any, plan: Plan, *, provision: bool, progress: Any) -> Launched:
            if name in self.refuse_launch:
                raise self.refuse_launch[name]
            run_id = f"{name}-{len(self.launched) + 1}"
            self.launched.append(run_id)
            return Launched(run_id)

        return launch

    def _carry(self, source: Any, source_target: Any, dest: Any, dest_target: Any, progress: Any = None) -> str:
        self.carried.append((source.name, dest.name))
        return f"carried ckpt-e0001-s0000023.pt from {source.name} to {dest.name}"


@pytest.fixture()
def services(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Services:
    return Services(tmp_path, monkeypatch)


@pytest.fixture()
def east_of_utc() -> Iterator[None]:
    """This machine (and the controller) 5 h 30 east of UTC: a start read in the wrong zone is hours off."""
    with time_zone("IST-5:30"):
        yield


def job(spec: Path | str, backends: str, tmp_path: Path, *more: str) -> Job:
    clouds = CLOUDS if spec == GPU_JOB else [*SageMakerHarness.overrides, *AzureMLHarness.overrides]
    return Job.load(spec, [*clouds, f"backends={backends}", f"slurm.workdir={tmp_path / 'work'}", *more])


def fails(run: Run, cause: Cause) -> recovery.Chain:
    """The chain's current attempt ends by ``cause``; what the watcher decides, as it keeps it."""
    chain = run.chain
    assert chain is not None
    attempt = chain.current
    where = chain.backend_of(attempt)
    status = RunStatus(attempt.run_id, where, RunState.FAILED, message=f"{cause.value} on {where}", cause=cause)
    recovery.decide(chain, status, Runner.open(where), {})
    chain.save()
    return chain


def test_a_backend_set_aside_at_submit_is_never_moved_to_and_the_usable_rest_is(
    services: Services, tmp_path: Path
) -> None:
    """The chain's next backends are the usable ones ranked after the one launched: neither none (the rest of the
    ranking dropped) nor one the checks set aside (the ranking's tail, kept with its plan)."""
    services.refuse("sagemaker", QUOTA)  # at submit only: asked again, it would pass
    services.slurm_starts_in(0)
    run = job(GPU_JOB, "[sagemaker, azureml, slurm]", tmp_path, "limits.max_recoveries=3").submit("auto")
    assert (run.backend.name, services.launched) == ("azureml", ["azureml-1"])
    said = run.plan.decisions[0]  # type: ignore[union-attr]
    assert "1. azureml" in said and "2. slurm" in said and f"3. sagemaker: not used: quota: {QUOTA}" in said, said
    chain = run.chain
    assert chain is not None and [p["backend"] for p in chain.placements] == ["slurm"], chain.placements
    assert placement_moves(chain) == "; after a capacity failure it moves to slurm"

    moved = fails(run, Cause.CAPACITY)
    assert (moved.current.backend, moved.current.run_id) == ("slurm", "slurm-2"), moved.message
    assert moved.current.note.startswith("moved from azureml after capacity") and services.carried == [
        ("azureml", "slurm")
    ]
    again = fails(run, Cause.CAPACITY)  # no backend left to move to: tried again where it is
    assert (again.current.backend, again.placements) == ("slurm", []), again.message
    assert services.launched == ["azureml-1", "slurm-2", "slurm-3"]  # never the one set aside, though it passes now


def test_a_backend_that_refuses_the_launch_is_skipped_for_the_next_and_the_chain_says_why(
    services: Services, tmp_path: Path
) -> None:
    """The service's own error (translated by the backend) is caught at launch and the next of the ranking is
    launched; the run's first attempt says which backend refused and why."""
    error = {"Error": {"Code": "ResourceLimitExceeded", "Message": QUOTA}}
    services.refuse_launch["sagemaker"] = ClientError(error, "CreateTrainingJob")  # raw, as boto3 raises it
    services.slurm_starts_in(0)
    run = job(GPU_JOB, "[azureml, slurm, sagemaker]", tmp_path).submit("auto")
    assert (run.backend.name, services.launched) == ("azureml", ["azureml-1"])
    chain = run.chain
    assert chain is not None
    assert chain.current.note == (
        "placed by -b auto (ranked sagemaker, azureml, slurm); refused at launch: sagemaker (SageMaker refused the "
        f"request (ResourceLimitExceeded): {QUOTA})"
    )
    assert [p["backend"] for p in chain.placements] == ["slurm"]  # the refused one comes before: not a move target
    moved = fails(run, Cause.CAPACITY)
    assert (moved.current.backend, services.launched) == ("slurm", ["azureml-1", "slurm-2"]), moved.message


@pytest.mark.usefixtures("east_of_utc")
def test_slurms_start_estimate_is_read_from_sbatch_test_only_and_ranks_it_first_when_soon_last_when_late(
    services: Services, tmp_path: Path
) -> None:
    """Slurm's answer to ``sbatch --test-only`` (the plan's own script, on stdin) is read as a time in this
    machine's zone and turned into a wait: 10 minutes keeps Slurm first, 2 hours puts it after the clouds and the
    submit and its moves follow that order. Read as a wait, in UTC, or not at all, the order is wrong."""
    tiny = job(TINY, "[slurm, sagemaker, azureml]", tmp_path)  # no backend prices it: the order of preference
    services.slurm_starts_in(600)
    soon = tiny.place()
    assert [p.backend for p in soon] == ["slurm", "sagemaker", "azureml"], [p.line() for p in soon]
    assert soon[0].starts_in is not None and abs(soon[0].starts_in - 600) < 30, soon[0].starts_in
    assert soon[0].line() == "slurm: no price, starts in about 10 min"
    assert services.asked_script == soon[0].plan.documents["job.sbatch"]  # type: ignore[union-attr]

    services.slurm_starts_in(2 * 3600)
    late = tiny.place()
    assert [p.backend for p in late] == ["sagemaker", "azureml", "slurm"], [p.line() for p in late]
    assert late[2].line() == "slurm: no price, starts in about 2.0 h"
    run = tiny.submit("auto", ranking=late)
    assert run.backend.name == "sagemaker"
    assert fails(run, Cause.CAPACITY).current.backend == "azureml"
    assert fails(run, Cause.CAPACITY).current.backend == "slurm"  # late, but still the next that takes the job
    assert services.launched == ["sagemaker-1", "azureml-2", "slurm-3"]


def test_a_backend_that_fails_its_checks_is_set_aside_with_their_words_and_its_scheduler_is_not_asked(
    services: Services, tmp_path: Path
) -> None:
    """A failed check sets the backend aside with the check's words, and its scheduler is not asked."""
    services.refuse("slurm", "no partition gpu on this cluster", check="partition")
    services.slurm_starts_in(0)
    ranking = job(TINY, "[slurm, sagemaker]", tmp_path).place()
    assert [p.line() for p in ranking] == [
        "sagemaker: no price, starts when submitted (no queue estimate)",
        "slurm: not used: partition: no partition gpu on this cluster",
    ]
    assert not (tmp_path / "asked.sbatch").exists()  # a Slurm that does not answer is not waited for twice
