"""A stop on SageMaker is a checkpoint for a user's own script, rehearsed as AWS ships it.

A tutorial-style DDP script (tests/support/dataloader_saver.py: ``DataLoader(num_workers=2)``, a save that takes
60 s after SIGTERM) runs under the request cloudddp sent, PID 1 being cloudddp's init, which starts the image's real
``start_with_right_hostname.sh`` and so AWS's toolkit at the versions the images carry (5.1.1 and the newest).
The rehearsal stops it as StopTrainingJob does (SIGTERM to every host's PID 1, SIGKILL 120 s later): each rank
hears the stop once, from its own launcher, its DataLoader workers never; the save outlasts torchrun's default
30 s shutdown timeout and still completes; the checkpoint reaches S3 and a second job resumes from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.backends.sagemaker.test_container_rehearsal import CPU_IMAGE, REGION, ROLE, aws, launch, run, succeeded
from tests.backends.sagemaker.test_frameworks import metric_steps
from tests.support.aws_emulator import own_bucket
from tests.support.dataloader_saver import (
    ENTRY,
    METRICS,
    RUNNING,
    WORKER_KILLED,
    dataloader_saver_code,
    resumed,
    saved,
    sigterms,
)
from tests.support.sagemaker_container import TOOLKITS, Aws, Rehearsal, Stop
from tests.support.waiting import LOADED

pytestmark = pytest.mark.slow
__all__ = ["aws"]  # the module's moto environment, shared with the container rehearsals

SAVE_DELAY = 60.0
"""Seconds the script's save takes after SIGTERM: past torchrun's default shutdown timeout (30 s), inside
SageMaker's grace."""
SAGEMAKER_GRACE = 120.0
"""StopTrainingJob: SIGTERM to PID 1, SIGKILL 120 s later (SageMaker API reference, StopTrainingJob)."""
INIT_PASSED = "_cloudddp_init.py: signal 15 passed on to 1 process(es)"
"""What the init says when it signalled torchrun's agent alone."""


def saver_job(root: Path, nodes: int, processes: int, args: list[str]) -> dict[str, Any]:
    return {
        "name": "dataloader-saver",
        "code": {"dir": str(dataloader_saver_code(root)), "entry": ENTRY, "args": args},
        "resources": {"nodes": nodes, "gpus_per_node": 0, "processes_per_node": processes, "interconnect": "any"},
        "metrics": METRICS,  # the loss the script prints in its own words
        "sagemaker": {
            "region": REGION,
            "role": ROLE,
            "bucket": own_bucket(root),  # the test's own: both jobs find the same checkpoints there
            "instance_type": "ml.m5.xlarge",
            "image": CPU_IMAGE,
        },
    }


def text(rehearsal: Rehearsal) -> str:
    return "\n".join(host.log for host in rehearsal.hosts)


@pytest.mark.parametrize(
    ("toolkit", "nodes", "processes"),
    [(TOOLKITS[0], 1, 2), (TOOLKITS[-1], 2, 1)],  # each ~90 s, most of it the save: one layout per toolkit
    ids=[f"{TOOLKITS[0]}-1x2", f"{TOOLKITS[-1]}-2x1"],
)
@pytest.mark.timeout(LOADED + 300)
def test_a_stop_lets_an_own_script_with_dataloader_workers_save_for_60_s_and_a_second_job_resumes(
    toolkit: str,
    nodes: int,
    processes: int,
    tmp_path: Path,
    aws: Aws,
) -> None:
    job = saver_job(tmp_path, nodes, processes, ["--steps", "100000", "--save-delay", str(SAVE_DELAY)])
    request = launch(job, f"d{nodes}{processes}" + toolkit.replace(".", ""))
    stop = Stop(on=RUNNING, grace=SAGEMAKER_GRACE)
    first = run(request, tmp_path / "first", aws, toolkit=toolkit, stop=stop, timeout=SAGEMAKER_GRACE + 180)
    log = text(first)
    print(f"\nstopped: {first.seconds:.1f} s on sagemaker-training {first.toolkit}, {nodes}x{processes}")
    assert stop.sent_at is not None, log[-4000:]
    for host in first.hosts:  # every container ended by itself inside the grace (None: the rig's SIGKILL)
        assert host.returncode is not None, host.log[-4000:]
        # PID 1 signalled torchrun's agent alone: not the ranks, their programs or the DataLoader workers.
        assert host.log.count(INIT_PASSED) == 1, host.log[-4000:]
    assert not WORKER_KILLED.search(log), log[-4000:]
    assert sigterms(log) == {rank: 1 for rank in range(nodes * processes)}, log[-4000:]
    [(step, epoch)] = saved(log)  # after the whole delay: torchrun waited the grace, not its own 30 s
    assert step >= 5, log[-4000:]

    bucket, _, prefix = request["CheckpointConfig"]["S3Uri"].removeprefix("s3://").partition("/")
    listed = aws.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix + "/").get("Contents", [])
    assert "dataloader-saver.pt" in {o["Key"].rsplit("/", 1)[1] for o in listed}
    assert metric_steps(request, first, "loss") == list(range(1, step + 1))  # each step's loss once, rank 0's

    more = saver_job(tmp_path, nodes, processes, ["--steps", "3", "--save-delay", "0"])
    more["checkpoint"] = {"path": request["CheckpointConfig"]["S3Uri"]}  # other arguments: name the first's folder
    more_request = launch(more, f"e{nodes}{processes}" + toolkit.replace(".", ""))
    second = run(more_request, tmp_path / "second", aws, toolkit=toolkit)
    succeeded(second)
    log = text(second)
    assert resumed(log) == {rank: (step, epoch) for rank in range(nodes * processes)}, log[-4000:]
    assert f"rank 0 finished at step {step + 3} " in log, log[-4000:]
    assert metric_steps(more_request, second, "loss") == [step + 1, step + 2, step + 3]
