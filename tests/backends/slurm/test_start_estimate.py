"""``-b auto``'s start estimate on the test cluster: ``sbatch --test-only`` with the plan's script asks the
scheduler when the job would start, submitting nothing; with both nodes taken by a job with a time limit, the
answer is that job's end, and the placement says so."""

from __future__ import annotations

import time

import pytest

from cloudddp.backends.slurm.start import start_estimate
from tests.support.harnesses import SlurmHarness
from tests.support.slurm_cluster import SlurmCluster
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


def queued(cluster: SlurmCluster) -> list[str]:
    return cluster.run("squeue", "-h", "-o", "%i").stdout.split()


def test_the_scheduler_says_now_on_a_free_cluster_and_the_blocking_jobs_end_on_a_full_one_submitting_nothing(
    cluster: SlurmCluster,
) -> None:
    harness = SlurmHarness(cluster)
    plan = harness.backend.render(harness.job("code.args=[--epochs, 1]").spec)
    free = start_estimate(plan)
    assert free is not None and abs(free - time.time()) < 90, free
    assert queued(cluster) == []  # asked, not submitted

    blocker = cluster.run(
        "sbatch", "--parsable", "-N", "2", "--exclusive", "-t", "30", "-o", "/dev/null", "--wrap", "sleep 600"
    )
    job = blocker.stdout.strip().split(";")[0]
    try:
        wait_until(lambda: cluster.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == "RUNNING", 30)
        busy = harness.backend.start_estimate(plan)
        assert busy is not None and busy - time.time() > 20 * 60, busy  # when the 30-minute job's limit ends
        assert queued(cluster) == [job]
    finally:
        cluster.run("scancel", job, check=False)
