"""A listener that another user binds in advance, on the port a script could compute from the job id and on
a spread of others, is never joined: node 0's torchrun agent (or, under ``slurm.launch: srun``, rank 0's task) binds
the rendezvous itself and the others read where it is from the run folder. A site's fixed ``slurm.rendezvous_port``
that is taken fails the run as an infrastructure failure, and nothing connects to the listener there either."""

from __future__ import annotations

import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudddp.api import Job, Run
from cloudddp.backends.status import Cause, RunState
from tests.backends.slurm.conftest import cancel_leftover_jobs
from tests.support import users
from tests.support.cli import FIXTURES
from tests.support.port_squatter import PortSquatter
from tests.support.slurm_cluster import SlurmCluster
from tests.support.users import OtherUser

pytestmark = pytest.mark.slow
TINY = FIXTURES / "tinyjob" / "job.yaml"
SPREAD = [*range(15000, 30000, 250), *range(32800, 61000, 1000)]
"""The old formula's range (15000-29999) and Linux's ephemeral one, sampled."""


@pytest.fixture
def other(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[OtherUser]:
    squatter = users.required("a second user to squat the ports")
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    yield squatter
    cancel_leftover_jobs(slurm_cluster, seconds=20)


def old_ports(cluster: SlurmCluster) -> list[int]:
    """The ports the old script would have used for the next few jobs (restart 0 and 1): a held job tells the
    next job id."""
    held = cluster.run("sbatch", "--parsable", "--hold", "--output=/dev/null", "--wrap=true").stdout.strip()
    cluster.run("scancel", held.split(";")[0])
    last = int(held.split(";")[0])
    return [15000 + (job * 10 + restart) % 15000 for job in range(last + 1, last + 4) for restart in (0, 1)]


def submit(*overrides: str) -> Run:
    on_cluster = ["resources.nodes=2", f"slurm.python={sys.executable}", "slurm.kill_wait=5", "slurm.status_every=1"]
    return Job.load(TINY, [*on_cluster, *overrides]).submit("slurm", poll_seconds=0.2)


@pytest.mark.parametrize("launch", ["torchrun", "srun"])
def test_a_listener_bound_in_advance_on_the_old_port_and_a_spread_is_never_joined(
    slurm_cluster: SlurmCluster, other: OtherUser, launch: str
) -> None:
    predicted = old_ports(slurm_cluster)
    squatter = PortSquatter.start(other, [*predicted, *SPREAD])
    try:
        run = submit("code.args=[--epochs, '2', --sleep, '0.05']", f"slurm.launch={launch}")
        status = run.wait(timeout=180, poll=0.5)
    finally:
        seen = squatter.report()
    held = {port for _, port in seen["bound"]}
    assert set(predicted) <= held and len(held) > 50, "the squatter held the old formula's ports and the spread"
    assert seen["received"] == [], "no node connected to the squatter's listeners"
    assert status.state is RunState.SUCCEEDED, status
    sources = {line.source for line in run.logs()}
    assert {"node0/rank0", "node1/rank1"} <= sources or {"node0/rank1", "node1/rank0"} <= sources, sources
    endpoint = Path(status.details["run_dir"]) / ".cloudddp-rendezvous"
    host, port = endpoint.read_text().rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) not in held  # node 0 bound a port the kernel picked, not a squatted one
    info = endpoint.lstat()
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600


@pytest.mark.parametrize("launch", ["torchrun", "srun"])
def test_a_taken_site_port_fails_as_infrastructure_and_is_not_joined(
    slurm_cluster: SlurmCluster, other: OtherUser, launch: str
) -> None:
    squatter = PortSquatter.start(other, [29411])
    try:
        run = submit("slurm.rendezvous_port=29411", f"slurm.launch={launch}")
        status = run.wait(timeout=120, poll=0.5)
    finally:
        seen = squatter.report()
    assert seen["bound"] and seen["received"] == [], seen
    assert status.state is RunState.FAILED and status.cause is Cause.INFRASTRUCTURE, status
    assert status.message.startswith("slurm.rendezvous_port is taken on node node1"), status.message
    assert any("rendezvous port 29411 (slurm.rendezvous_port) is taken" in line.text for line in run.logs())
