"""Slurm as real clusters are configured (tests/support/slurm_cluster.py): jobs submitted by an unprivileged user,
who cannot read node data (``PrivateData=nodes``); preemption with a grace time (partition ``spot``,
``GraceTime>0``, ``PreemptMode=REQUEUE``, preempted from the higher-tier partition ``urgent``); and a training
longer than its partition's time limit (partition ``short``), run as a chain of requeued allocations
(test_stops.py, with torchrun's shape).

The user submits with ``cloudddp`` as on a login node (its own uid, home and ``CLOUDDDP_HOME``, nothing of this
process's environment); this process, as root, makes the cluster preempt the job and reads the user's files."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cloudddp.backends.slurm.script import PREEMPT_MARK, REQUEUE_MARK, START_MARK
from cloudddp.observe.metrics import parse_metric_line
from tests.support.cli import FIXTURES, ROOT
from tests.support.slurm_cluster import GRACE_TIME, SPOT, URGENT, ClusterUser, SlurmCluster

pytestmark = pytest.mark.slow


def cloudddp(user: ClusterUser, *args: str, timeout: float = 120) -> str:
    """``cloudddp ARGS`` as the user: its stdout; fails the test with stderr when it exits non-zero."""
    env = user.env(
        CLOUDDDP_HOME=str(user.home / ".cloudddp"), PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1", COLUMNS="200"
    )
    done = user.run([user.python, "-m", "cloudddp", *args], env=env, timeout=timeout)
    assert done.returncode == 0, f"cloudddp {' '.join(args)} exited {done.returncode}: {done.stderr[-3000:]}"
    return done.stdout


def submit(user: ClusterUser, spec: Path, *overrides: str) -> str:
    """Submitted as the user, detached: the run id."""
    flags = [x for o in [f"slurm.python={user.python}", "slurm.kill_wait=5", *overrides] for x in ("-o", o)]
    return cloudddp(user, "submit", str(spec), "-b", "slurm", "-d", "-q", *flags).strip().splitlines()[-1]


def run_dir(user: ClusterUser, run_id: str) -> Path:
    return user.home / ".cloudddp" / "slurm" / "runs" / run_id


def job_id_of(cluster: SlurmCluster, run_id: str) -> str:
    ids = cluster.run("squeue", "-h", "-t", "all", f"--name={run_id}", "-o", "%i").stdout.split()
    assert len(ids) == 1, ids
    return ids[0]


def wait_for(what: str, ready: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"{what}: not after {timeout} s"
        time.sleep(0.3)


def metrics_in(folder: Path) -> list[dict[str, Any]]:
    """Rank 0's metric lines so far, from the node logs (read as root while the job runs)."""
    found = []
    for log in sorted((folder / "logs").glob("node*.log")):
        for line in log.read_text(errors="replace").splitlines():
            record = parse_metric_line(line)
            if record is not None:
                found.append(record.to_dict())
    return found


def finished(user: ClusterUser, run_id: str, timeout: float = 240) -> dict[str, Any]:
    """The run's status as the user's ``cloudddp status`` shows it, once the run has ended; a run that did not
    succeed fails the test with its message and the end of its batch log."""
    deadline = time.monotonic() + timeout
    while True:
        status: dict[str, Any] = json.loads(cloudddp(user, "status", run_id, "--json"))
        if status["state"] in ("succeeded", "failed", "cancelled"):
            break
        assert time.monotonic() < deadline, status
        time.sleep(2)
    logs = [run_dir(user, run_id) / "batch.log", *sorted((run_dir(user, run_id) / "logs").glob("*.log"))]
    tail = "\n".join(f"{log.name}: {log.read_text(errors='replace')[-1500:]}" for log in logs if log.exists())
    assert status["state"] == "succeeded", f"{status['state']}: {status['message']}\n{tail}"
    return status


PREEMPTED_TRAINING = """
import json, os, signal, time
import torch
import torch.distributed as dist
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
dist.init_process_group("gloo")
rank = dist.get_rank()
mark = os.path.join(os.environ["CLOUDDDP_MODEL_DIR"], "step")
step = int(open(mark).read()) if os.path.exists(mark) else 0
if rank == 0 and step:
    print(f"resumed from {mark} at step {step}", flush=True)
while step < STEPS:
    time.sleep(0.2)
    flag = torch.tensor([1.0 if stop else 0.0])
    dist.all_reduce(flag)  # every rank stops at the same step
    if flag.item() > 0:
        if rank == 0:
            print(f"stopping on SIGTERM after step {step}", flush=True)
        break
    step += 1
    if rank == 0:
        print("CLOUDDDP_METRIC " + json.dumps({"step": step}), flush=True)
        open(mark + ".tmp", "w").write(str(step))
        os.replace(mark + ".tmp", mark)
dist.destroy_process_group()
"""


def test_a_job_preempted_with_a_grace_time_is_requeued_resumes_and_runs_every_step_once(
    slurm_cluster: SlurmCluster, user: ClusterUser, tmp_path: Path
) -> None:
    """A DDP training (gloo, 2 nodes, paced at 5 steps a second so the preemption lands mid-run), submitted by an
    unprivileged user (node data private to it) to a partition with GraceTime>0: a job of a higher-tier
    partition takes both nodes, Slurm sends SIGTERM to the training only, the training checkpoints and ends
    within the grace time, and the batch script requeues the job itself (without it the job ended: succeeded
    after a few steps with srun, failed as the script's fault with torchrun). It resumes from its checkpoint and
    succeeds with every step once; status says why it was requeued, while it waits and at the end. Under srun
    (one task per rank); torchrun's shape is the next test's."""
    launch = "srun"
    refused = user.run(["scontrol", "-o", "show", "node", "node1"])
    assert refused.returncode != 0 and "permission denied" in refused.stderr.lower(), refused
    steps = 60
    code = user.home / f"preempted-{launch}"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text(PREEMPTED_TRAINING.replace("STEPS", str(steps)))
    spec = code / "job.yaml"
    spec.write_text(
        json.dumps(
            {
                "name": f"preempt-{launch}",
                "code": {"dir": ".", "command": [user.python, "train.py"]},
                "resources": {"nodes": 2},
                "slurm": {"launch": launch, "partition": SPOT},
            }
        )
    )
    run_id = submit(user, spec)
    folder = run_dir(user, run_id)
    job = job_id_of(slurm_cluster, run_id)
    wait_for("step 5", lambda: any((r.get("step") or 0) >= 5 for r in metrics_in(folder)))
    urgent = slurm_cluster.sbatch(
        "-p", URGENT, "-N2", "--cpus-per-task=2", "-o", "urgent.log", "--wrap", "sleep 10", cwd=tmp_path
    )  # both CPUs of both nodes: the spot job must go
    slurm_cluster.wait_job(urgent, {"RUNNING"}, timeout=GRACE_TIME + 30)
    requeued = slurm_cluster.job(job)
    assert (requeued["JobState"], requeued["Restarts"]) == ("PENDING", "1"), requeued
    waiting = json.loads(cloudddp(user, "status", run_id, "--json"))
    assert waiting["state"] == "pending" and waiting["message"].startswith("requeued after preemption (restart 1)")

    status = finished(user, run_id)
    assert status["message"] == "finished after 1 requeue: preemption", status
    details = status["details"]
    assert details["restarts"] == 1 and details["requeue_reasons"] == ["preemption"], details
    batch = (folder / "batch.log").read_text()
    assert f"{PREEMPT_MARK}: Slurm selected this job for preemption" in batch, batch[-3000:]
    assert f"{REQUEUE_MARK} {job} after preemption" in batch and batch.count(START_MARK) == 2, batch[-3000:]
    assert "failed" not in batch.lower(), batch[-3000:]  # the requeue's own SIGTERM fails nothing
    logs = cloudddp(user, "logs", run_id)
    assert "stopping on SIGTERM after step" in logs and "resumed from" in logs, logs[-3000:]
    records = [json.loads(line) for line in cloudddp(user, "metrics", run_id, "--json").splitlines()]
    assert [r["step"] for r in records] == list(range(1, steps + 1)), "every step exactly once, none lost"


def test_an_unprivileged_users_two_node_torchrun_job_runs_where_node_data_is_private(
    slurm_cluster: SlurmCluster, user: ClusterUser
) -> None:
    """PrivateData=nodes: `scontrol show node` is refused to the user, so the rendezvous host is the batch
    script's host; both torchrun agents meet there."""
    refused = user.run(["scontrol", "-o", "show", "node", "node1"])
    assert refused.returncode != 0 and "permission denied" in refused.stderr.lower(), refused
    run_id = submit(
        user,
        FIXTURES / "tinyjob" / "job.yaml",
        "resources.nodes=2",
        "resources.processes_per_node=1",
        "code.args=[--epochs, '2', --sleep, '0.05']",
    )
    status = finished(user, run_id)
    assert status["state"] == "succeeded", status
    logs = cloudddp(user, "logs", run_id)
    assert "rank 0/2" in logs and "rank 1/2" in logs, logs[-3000:]
    records = [json.loads(line) for line in cloudddp(user, "metrics", run_id, "--json").splitlines()]
    assert [(r["epoch"], r["world"]) for r in records] == [(1, 2), (2, 2)]
