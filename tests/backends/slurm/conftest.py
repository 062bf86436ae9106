"""The session's Slurm cluster as the backend's tests use it (``cluster``: SLURM_CONF set, no job left behind), and
the rig's unprivileged user, for the tests that submit as on a login node (test_preemption.py, test_stops.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.support import users
from tests.support.slurm_cluster import ClusterUser, SlurmCluster


@pytest.fixture
def cluster(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """The cluster, with ``SLURM_CONF`` pointing at it as on its login node; a test that failed half-way leaves no
    job behind."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    yield slurm_cluster
    cancel_leftover_jobs(slurm_cluster, seconds=20)


@pytest.fixture
def user(slurm_cluster: SlurmCluster) -> Iterator[ClusterUser]:
    users.required("an unprivileged user for the cluster's jobs")
    yield slurm_cluster.user()
    cancel_leftover_jobs(slurm_cluster)


def cancel_leftover_jobs(slurm_cluster: SlurmCluster, seconds: float = 30) -> None:
    """A test that failed half-way leaves no job behind to hold the nodes for the next one."""
    jobs = slurm_cluster.run("squeue", "-h", "-o", "%i", check=False).stdout.split()
    if jobs:
        slurm_cluster.run("scancel", *jobs, check=False)
        deadline = time.monotonic() + seconds
        while slurm_cluster.run("squeue", "-h", check=False).stdout.strip() and time.monotonic() < deadline:
            time.sleep(0.2)
