"""``sbatch_options: [-M, away]`` on two real clusters that share one slurmdbd
(tests/support/slurm_accounting.py). The job runs on ``away``; the login node's own cluster (``home``) does not
know it, so status, logs and cancel work only because every Slurm command of the run names ``-M away``."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.status import RunState
from tests.support.cli import FIXTURES
from tests.support.rigs import rig_unavailable
from tests.support.slurm_accounting import Accounting, accounting_fixture
from tests.support.slurm_cluster import SlurmUnavailable

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rig() -> Iterator[Accounting]:
    try:
        yield from accounting_fixture(Path(tempfile.mkdtemp(prefix="cloudddp-slurmdbd-")))
    except SlurmUnavailable as e:
        rig_unavailable(f"no two clusters with accounting, so -M is not tested here: {e}")


def spec_file(tmp_path: Path, name: str, command: str) -> Path:
    spec = tmp_path / f"{name}.yaml"
    slurm = {"launch": "srun", "python": sys.executable, "kill_wait": 5, "status_every": 1}
    code = {"dir": str(FIXTURES / "tinyjob"), "command": ["bash", "-c", command]}
    spec.write_text(json.dumps({"name": name, "code": code, "slurm": {**slurm, "sbatch_options": ["-M", "away"]}}))
    return spec


def test_a_job_sent_to_another_cluster_is_followed_and_cancelled_there(
    rig: Accounting, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, away = rig.clusters["home"], rig.clusters["away"]
    monkeypatch.setenv("SLURM_CONF", str(home.conf))
    run = Job.load(spec_file(tmp_path, "far", 'echo "on $SLURM_CLUSTER_NAME"')).submit("slurm", poll_seconds=0.2)
    status = run.wait(timeout=90, poll=0.5)
    assert status.state is RunState.SUCCEEDED, (status, [line.text for line in run.logs()])
    assert [line.text for line in run.logs() if line.text.startswith("on ")] == ["on away"]
    job_id = status.details["job_id"]
    assert away.job(job_id)["JobName"] == run.run_id
    assert home.run("scontrol", "-o", "show", "job", job_id, check=False).returncode != 0  # home never had it

    held = Job.load(spec_file(tmp_path, "held", "sleep 300")).submit("slurm", poll_seconds=0.2)
    deadline = time.monotonic() + 60
    while (running := held.status()).state is not RunState.RUNNING and time.monotonic() < deadline:
        time.sleep(0.5)
    assert running.state is RunState.RUNNING, running
    held.cancel()
    ended = held.wait(timeout=60, poll=0.5)
    assert ended.state is RunState.CANCELLED, ended
    assert away.job(ended.details["job_id"])["JobState"] == "CANCELLED"
