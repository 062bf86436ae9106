"""The watcher's decisions that need no backend: when a failure's cause is worth waiting for."""

from __future__ import annotations

import pytest

from cloudddp.backends.base import Cause, RunState, RunStatus
from cloudddp.runs import recovery


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
