"""The conformance matrix, SageMaker cell: the Lightning project of ``examples/`` as it is, rehearsed as AWS ships
it (tests/support/sagemaker_container.py: the request cloudddp sent, AWS's real training toolkit, one
namespace-isolated container per host), stopped as StopTrainingJob stops it, resumed by a second job from the
checkpoint SageMaker synced to S3, with its metrics read back from CloudWatch the way ``cloudddp metrics`` does
(the rows of Lightning's metrics.csv, printed by the shipped reader ``_cloudddp_logs.py`` beside the launcher on
global rank 0's host: without it no record comes back and the stop is never sent).

2 hosts × 1 process, not 1 × 2: across hosts ``{{nodes}}`` must expand to 2 for Lightning's ``num_nodes``, the stop
reaches two containers whose ranks must agree on it over the network, only algo-1's disk holds rank 0's
``last.ckpt`` and ``metrics.csv``, and both hosts of the second job must find the checkpoint SageMaker restored.

The script knows nothing of cloudddp: cloudddp's hooks in each rank's process replace Lightning's own SIGTERM
handler (which broadcasts from inside the handler and hung both ranks until the SIGKILL in about one stop of six
here), save ``last.ckpt`` at the step both ranks agree on, and on the resume skip the batches the interrupted epoch
had trained: what each rank trains across both jobs is, sample by sample, what it trains in one uninterrupted run
of the same world (local 1×2: the same seed and world size give the same order).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest
import torch
import yaml

from cloudddp.api import Job, Run
from cloudddp.backends.sagemaker import SageMakerBackend
from cloudddp.observe.metrics import MetricRecord
from cloudddp.runs.database import RunDatabase
from tests.backends.sagemaker.test_container_rehearsal import CPU_IMAGE, REGION, ROLE, aws, launch, run, succeeded
from tests.support import frameworks, sample_trace
from tests.support.aws_emulator import own_bucket, put_logs
from tests.support.frameworks import steps_in, traced
from tests.support.sagemaker_container import Aws, Rehearsal, Stop
from tests.support.waiting import LOADED

pytestmark = pytest.mark.slow
__all__ = ["aws"]  # the module's moto environment, shared with the container rehearsals

ARGS = ["--num-nodes", "{{nodes}}", "--devices", "{{processes_per_node}}", "--root", "{{checkpoint_dir}}"]
ONCE = ["--max-epochs", "1", "--every-n-steps", "1000"]
"""One epoch (1792 samples, batches of 32, 2 ranks: 28 steps); no periodic checkpoint before it ends, so a
resume can only come from the stop's own ``last.ckpt``."""
TRAINING = 'CLOUDDDP_METRIC {"step":'
"""The first metric line the launcher reads out of rank 0's metrics.csv: training runs, the moment to stop. The
launcher looks every 5 s, so the first job's steps take 0.5 s (14 s an epoch): the stop lands mid-epoch."""
GRACE = 60.0


def lightning_job(root: Path, args: list[str]) -> dict[str, Any]:
    job: dict[str, Any] = yaml.safe_load(traced("lightning", root, args).read_text())
    job["code"]["dir"] = str(root / "lightning")
    job["resources"] = {"nodes": 2, "gpus_per_node": 0, "processes_per_node": 1, "interconnect": "any"}
    job["sagemaker"] = {
        "region": REGION,
        "role": ROLE,
        "bucket": own_bucket(root),  # the test's own: both jobs find the same checkpoints there
        "instance_type": "ml.m5.xlarge",
        "image": CPU_IMAGE,
    }
    return job


def text(rehearsal: Rehearsal) -> str:
    return "\n".join(host.log for host in rehearsal.hosts)


def read_back(request: dict[str, Any], rehearsal: Rehearsal) -> list[MetricRecord]:
    """The job's metric records as ``cloudddp metrics`` reads them: the hosts' output sent to CloudWatch Logs
    (moto) as SageMaker sends it, read back through the Run API."""
    job = request["TrainingJobName"]
    for host in rehearsal.hosts:
        put_logs(job, host.name, [line for line in host.lines if line], 0)  # CloudWatch keeps no empty event
    backend = SageMakerBackend(records=RunDatabase(), session=boto3.session.Session(region_name=REGION))
    return list(Run(job, backend).metrics())


def metric_steps(request: dict[str, Any], rehearsal: Rehearsal, name: str) -> list[int]:
    """The steps of ``name``'s records, read back as ``cloudddp metrics`` reads them."""
    return [r.step for r in read_back(request, rehearsal) if name in r.values and r.step is not None]


@pytest.mark.timeout(LOADED + 300)
def test_lightning_on_two_hosts_stops_into_last_ckpt_and_a_second_job_resumes_from_it(tmp_path: Path, aws: Aws) -> None:
    whole = traced("lightning", tmp_path / "whole", [*ARGS, *ONCE], local={"nodes": 1, "processes_per_node": 2})
    expected = sample_trace.steps(frameworks.succeeded(Job.load(whole).submit("local")))
    assert [len(expected[r]) for r in (0, 1)] == [28, 28], expected.keys()
    request = launch(lightning_job(tmp_path / "a", [*ARGS, *ONCE, "--step-sleep", "0.5"]), "lit1")
    stop = Stop(on=TRAINING, grace=GRACE)
    first = run(request, tmp_path / "first", aws, stop=stop, timeout=GRACE + 120)
    log = text(first)
    print(f"\nlightning 2x1 stopped: {first.seconds:.1f} s")
    assert stop.sent_at is not None, log[-4000:]
    assert all(host.returncode is not None for host in first.hosts), log[-4000:]  # none needed the SIGKILL
    kept = first.host("algo-1").opt_ml.parent / "opt-ml" / "checkpoints" / "checkpoints" / "last.ckpt"
    stopped_at = torch.load(kept, map_location="cpu", weights_only=False)["global_step"]
    assert 5 <= stopped_at < 28, log[-4000:]
    stops = steps_in(r"cloudddp: stopped at step (\d+): saved \S+/last\.ckpt", log)
    assert stops == [stopped_at] * 2, log[-4000:]  # both agreed
    assert "]:Traceback" not in log, log[-4000:]  # no rank's (torchrun's agent prints one for its own SIGTERM)
    before = metric_steps(request, first, "train_loss")
    assert before and before == sorted(set(before)) and before[-1] < stopped_at, before

    more = lightning_job(tmp_path / "b", [*ARGS, *ONCE])
    more["checkpoint"] = {"path": request["CheckpointConfig"]["S3Uri"]}  # the first job's checkpoints
    again = launch(more, "lit2")
    second = run(again, tmp_path / "second", aws)
    print(f"lightning 2x1 resumed: {second.seconds:.1f} s")
    succeeded(second)
    log = text(second)
    assert "Restored all states from the checkpoint at /opt/ml/checkpoints/checkpoints/last.ckpt" in log, log[-4000:]
    # Both ranks ended together at the epoch's end: each loaded the stop's step from SageMaker's copy on its host.
    assert steps_in(r"finished at step (\d+)", log) == [28, 28], log[-4000:]
    trained, resumed = sample_trace.steps(text(first)), sample_trace.steps(log)
    assert all(trained[r] + resumed[r] == expected[r] for r in (0, 1)), (stopped_at, len(trained[0]), len(resumed[0]))
    saved = second.host("algo-1").opt_ml.parent / "opt-ml" / "checkpoints" / "checkpoints"
    assert not list(saved.glob("last-v*.ckpt")), "the resumed run wrote over the stop's last.ckpt"
    after = metric_steps(again, second, "train_loss")
    # the resumed run's first record is within one logging interval (log_every_n_steps=5) of the stop, not from 0
    assert after and stopped_at <= after[0] <= stopped_at + 5 and after[-1] <= 28, (stopped_at, after)
