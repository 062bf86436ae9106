"""``cloudddp stacks`` on a healthy running SageMaker job, rehearsed as AWS ships it
(tests/support/sagemaker_container.py: the request cloudddp sent, AWS's real training toolkit, one namespace-isolated
container per host, moto for S3 and CloudWatch Logs): 2 hosts × 1 process. The command puts its request object under
the job's output path; the launcher of each host's first process reads it with the job's credentials (every second
here: the poll set in the request's environment, as an image's ENV would), asks its own host's rank once, and the
hosts' output reaches CloudWatch Logs as SageMaker sends it (a pump here, line by line as the hosts write). Each rank
is shown once, and the job then goes on, finishes, and its checkpoint is whole."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import boto3
import pytest

from cloudddp.api import Run
from cloudddp.backends.sagemaker import SageMakerBackend
from cloudddp.backends.status import RunState
from cloudddp.injob.stack_requests import POLL, REQUEST_URI
from cloudddp.runs.database import RunDatabase
from tests.backends.sagemaker.test_container_rehearsal import CPU_IMAGE, REGION, ROLE, aws, launch, run
from tests.support.aws_emulator import own_bucket, put_logs, set_status
from tests.support.cli import cli
from tests.support.sagemaker_container import Aws, Rehearsal
from tests.support.stacks_job import (
    assert_dumps_in_the_log,
    last_checkpoint,
    ranks_shown,
    steps_of,
    wait_for_steps,
    write_script,
)
from tests.support.waiting import LOADED

pytestmark = pytest.mark.slow
ASK = {"CLOUDDDP_SAGEMAKER_POLL": "0.5", "CLOUDDDP_STACKS_WAIT_S": str(LOADED // 4)}
"""The command's environment: the backend's poll of the logs, and a wait for the hosts' answers (45 s by default) that
holds on a machine running other suites, where a host's poll, its rank's dump and the log pump are each slower."""
__all__ = ["aws"]  # the module's moto environment, shared with the container rehearsals


class LogPump(threading.Thread):
    """Each host's new whole lines, sent to its CloudWatch stream as they are written."""

    def __init__(self, job: str, box: Path, hosts: list[str]) -> None:
        super().__init__(daemon=True)
        self.job, self.box, self.hosts = job, box, hosts
        self.sent = dict.fromkeys(hosts, 0)
        self.stopped = threading.Event()

    def pump(self) -> None:
        for host in self.hosts:
            path = self.box / host / "container.log"
            lines = path.read_text(errors="replace").split("\n")[:-1] if path.exists() else []
            new = lines[self.sent[host] :]
            if any(new):  # CloudWatch takes no empty event
                put_logs(self.job, host, [line for line in new if line], self.sent[host])
            self.sent[host] += len(new)

    def run(self) -> None:
        while not self.stopped.wait(0.5):
            self.pump()


@pytest.mark.timeout(LOADED + 300)
def test_stacks_of_a_running_sagemaker_job_show_every_rank_once_and_leave_it_running(tmp_path: Path, aws: Aws) -> None:
    flag, checkpoints = tmp_path / "done", tmp_path / "checkpoints"
    checkpoints.mkdir()
    job = {
        "name": "rehearse-stacks",
        "code": {"dir": str(write_script(tmp_path / "code")), "entry": "train.py"},
        "resources": {"nodes": 2, "gpus_per_node": 0, "processes_per_node": 1, "interconnect": "any"},
        "checkpoint": {"enabled": False},
        "env": {"STACKS_DONE_FLAG": str(flag), "CHECKPOINTS": str(checkpoints), "OMP_NUM_THREADS": "1"},
        "sagemaker": {
            "region": REGION,
            "role": ROLE,
            "bucket": own_bucket(tmp_path),
            "instance_type": "ml.m5.xlarge",
            "image": CPU_IMAGE,
        },
    }
    request = launch(job, "stacks1")
    name = request["TrainingJobName"]
    assert request["Environment"][REQUEST_URI].endswith(f"/{name}/cloudddp-stacks-request"), request["Environment"]
    request["Environment"][POLL] = "1"
    set_status(name, "InProgress", "Training")
    rehearsed: list[Rehearsal] = []
    rehearsal = threading.Thread(target=lambda: rehearsed.append(run(request, tmp_path / "box", aws, timeout=LOADED)))
    pump = LogPump(name, tmp_path / "box", ["algo-1", "algo-2"])
    rehearsal.start()
    pump.start()
    backend = SageMakerBackend(records=RunDatabase(), session=boto3.session.Session(region_name=REGION))
    backend.poll_seconds = 0.5
    live = Run(name, backend)

    def log() -> str:
        return "\n".join(line.text for line in live.logs())

    try:
        wait_for_steps(log, 2)
        shown = cli("stacks", name, env=ASK)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        print(f"\nsagemaker: {shown.stdout.splitlines()[0]}")
        assert shown.stdout.startswith("2 of 2 ranks gave their stacks in "), shown.stdout
        assert ranks_shown(shown.stdout) == [0, 1], shown.stdout  # each rank once, none twice
        assert "train.py:" in shown.stdout, shown.stdout

        again: dict[str, Any] = json.loads(cli("stacks", name, "--json", env=ASK).stdout)
        assert [r["rank"] for r in again["ranks"]] == [0, 1] and again["missing"] == {}, again
        assert [r["host"] for r in again["ranks"]] == ["algo-1", "algo-2"], again
        assert live.status().state is RunState.RUNNING
        twice = dict.fromkeys(range(2), 2)  # each rank asked once by each request, on its own host
        assert_dumps_in_the_log(live.logs, twice)
    finally:
        flag.touch()
        rehearsal.join(timeout=200)
        pump.stopped.set()
        pump.join()
        pump.pump()
    hosts = rehearsed[0].hosts
    assert all(host.returncode == 0 for host in hosts), "\n".join(host.log[-3000:] for host in hosts)
    set_status(name, "Completed", "Completed")
    assert live.status().state is RunState.SUCCEEDED
    finished = steps_of(log())
    assert len(finished) == 2 and len(set(finished.values())) == 1, finished
    assert last_checkpoint(checkpoints) == finished[0], finished
    program = [line.text for line in live.logs() if line.program]  # torchrun's agents may log their exit barrier
    assert not any("Traceback" in text for text in program), program[-40:]
