"""The watcher's decisions that need no backend: when a failure's cause is worth waiting for, and what it does
without the secrets it needs."""

from __future__ import annotations

import json

import pytest

from cloudddp.api import Job
from cloudddp.backends.procs import Process
from cloudddp.backends.status import Cause, RunState, RunStatus
from cloudddp.errors import UserError
from cloudddp.plan import Plan
from cloudddp.runs import recovery
from tests.support.cli import FIXTURES
from tests.support.victim import Victim

TINY = FIXTURES / "tinyjob" / "job.yaml"


def failed(cause: Cause | None) -> RunStatus:
    return RunStatus("job-1", "azureml", RunState.FAILED, cause=cause)


def test_an_unknown_failure_is_asked_again_until_the_settle_time_has_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(recovery.time, "monotonic", lambda: clock[0])
    ended: dict[str, float] = {}
    assert recovery._reason_may_follow(failed(Cause.UNKNOWN), ended)
    clock[0] += recovery.SETTLE_SECONDS - 1
    assert recovery._reason_may_follow(failed(None), ended)
    clock[0] += 2
    assert not recovery._reason_may_follow(failed(Cause.UNKNOWN), ended), "then it is decided as unknown"


@pytest.mark.parametrize("cause", [Cause.PREEMPTED, Cause.USER_ERROR, Cause.CAPACITY])
def test_a_known_cause_or_a_success_is_decided_at_once(cause: Cause) -> None:
    assert not recovery._reason_may_follow(failed(cause), {})
    assert not recovery._reason_may_follow(RunStatus("job-1", "azureml", RunState.SUCCEEDED), {})


def test_a_watcher_without_the_literal_secrets_stops_the_chain_saying_how_never_sends_an_empty_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A restarted watcher has no literal secret (they are never stored): the next attempt is not launched with
    ``""``; the chain waits, saying to run ``cloudddp recover RUN --spec FILE``, which gives them back."""
    job = Job.load(TINY).override(env={"PEM": {"value": "literal-secret-value", "secret": True}})
    state = job.render("local").to_state()
    with pytest.raises(UserError, match=r"env\.PEM is a secret given as a literal"):
        Plan.from_state(state).secret_values({})  # never "" in its place
    chain = recovery.Chain("tiny-1", "local", "tiny", state, 3, [recovery.Attempt(1, "tiny-1", 0.0)])
    recovery.decide(chain, failed(Cause.PREEMPTED), runner=None, literals={})  # type: ignore[arg-type]
    assert chain.status == recovery.NEEDS_SECRETS and len(chain.attempts) == 1  # nothing launched
    assert "env.PEM" in chain.message and "cloudddp recover tiny-1 --spec" in chain.message
    assert "literal-secret-value" not in chain.message + json.dumps(state)
    spawned: list[dict[str, str]] = []
    monkeypatch.setattr(recovery, "spawn_watcher", lambda chain, literals: spawned.append(literals))
    assert not recovery.ensure_watched(chain, {}) and chain.status == recovery.NEEDS_SECRETS and not spawned
    assert recovery.ensure_watched(chain, {"PEM": "literal-secret-value"})
    assert chain.status == recovery.WATCHING and spawned == [{"PEM": "literal-secret-value"}]


def test_cancel_signals_the_watcher_only_while_its_pid_is_still_that_process() -> None:
    """A chain whose recorded watcher pid now names another process (a victim that notes a SIGTERM)."""
    victim = Victim()
    try:
        chain = recovery.Chain("tiny-2", "local", "tiny", {}, 1, [recovery.Attempt(1, "tiny-2", 0.0)])
        real = Process.of(victim.pid)
        assert real is not None
        chain.watcher_pid, chain.watcher = victim.pid, {**real.record(), "start": real.start - 1}  # another start
        assert not chain.watcher_alive()
        recovery.cancel(chain)
        assert chain.status == recovery.CANCELLED and victim.signals() == ["SIGWINCH"]  # not signalled
        chain.watcher = real.record()  # the watcher we started: signalled
        assert chain.watcher_alive()
        recovery.cancel(chain)
        assert victim.wait_ended(timeout=10) == ["SIGTERM", "exit 0"]
    finally:
        victim.stop()


def test_a_hangs_culprit_host_is_left_out_of_every_later_attempt_and_slurm_excludes_it() -> None:
    """The host a hang's verdict blames joins the hosts earlier attempts went without; Slurm's plan for the next
    attempt carries them as ``--exclude``, a cloud's is unchanged (its next job gets fresh hosts)."""
    from cloudddp.backends.plugins import backend_class

    chain = recovery.Chain("tiny-3", "slurm", "tiny", {}, 3, [recovery.Attempt(1, "tiny-3", 0.0, left_out=["n1"])])
    hang = RunStatus("tiny-3", "slurm", RunState.FAILED, cause=Cause.HANG)
    hang.details["failure"] = {"culprit_host": "n7"}
    assert recovery._left_out(chain, hang) == ["n1", "n7"]
    other = RunStatus("tiny-3", "slurm", RunState.FAILED, cause=Cause.INFRASTRUCTURE, details=hang.details)
    assert recovery._left_out(chain, other) == ["n1"], "only a hang blames a host"
    slurm = backend_class("slurm")()
    plan = slurm.render(Job.load(TINY, [f"slurm.python={__import__('sys').executable}"]).spec)
    sbatch = slurm.avoiding(plan, ["n1", "n7"]).request.sbatch
    assert sbatch[:2] == ("sbatch", "--exclude=n1,n7") and sbatch[2:] == plan.request.sbatch[1:]
    assert slurm.avoiding(plan, []) is plan
    local = backend_class("local")()
    local_plan = local.render(Job.load(TINY).spec)
    assert local.avoiding(local_plan, ["n1"]) is local_plan
