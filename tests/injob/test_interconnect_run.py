"""The interconnect pre-flight in a real job: two local nodes of one process each, torchrun's agents and their
store, gloo's all-reduce across both; the program starts after it and trains as ever."""

from __future__ import annotations

import pytest

from cloudddp.api import Job
from cloudddp.backends.status import RunState
from cloudddp.injob.interconnect import CPU_SIZES, TAG, size_words
from tests.support.cli import FIXTURES

pytestmark = pytest.mark.slow
TINY = FIXTURES / "tinyjob" / "job.yaml"


def test_the_preflight_measures_every_size_across_two_nodes_before_the_program_starts() -> None:
    overrides = ["local.nodes=2", "local.processes_per_node=1", "code.args=[--epochs, 2]", "distribution.preflight=on"]
    run = Job.load(TINY, overrides).submit("local")
    status = run.wait(timeout=180, poll=0.2)
    assert status.state is RunState.SUCCEEDED, status
    lines = [line.text for line in run.logs()]
    said = [t for t in lines if TAG in t]
    assert len(said) == 1, said  # rank 0 alone says it
    assert "no fabric chosen by the plan; gloo over TCP; 2 nodes busbw" in said[0], said
    records = list(run.metrics())
    preflight = [r for r in records if "interconnect_seconds" in r.values]
    assert len(preflight) == 1, records
    for size in CPU_SIZES:
        assert preflight[0].values[f"interconnect_busbw_{size_words(size).replace(' ', '')}"] > 0, preflight
    assert 0 < preflight[0].values["interconnect_seconds"] < 60, preflight
    assert [r.values["world"] for r in records if "world" in r.values] == [2.0, 2.0]  # then it trained, as ever
    first_training = next(i for i, t in enumerate(lines) if "rank 0/2 node 0" in t)
    assert lines.index(said[0]) < first_training, "the pre-flight ends before the program starts"


def test_without_the_setting_a_local_job_has_no_preflight() -> None:
    plan = Job.load(TINY, ["local.nodes=2", "local.processes_per_node=1"]).render("local")
    assert "CLOUDDDP_PREFLIGHT" not in str(plan.to_dict()["request"])
