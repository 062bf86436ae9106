"""A stop on Slurm is a checkpoint, with torchrun's shape (2 nodes × 2 processes), as an unprivileged user, on the
rig's partitions (tests/support/slurm_cluster.py: spot preempts with GraceTime 60, short's MaxTime is 1 min).

The training's only checkpoint is a ``checkpoint.files`` entry its rank 0 renames into place after a deliberately
slow save (8 s), while the other ranks end (no barrier); each rank counts the SIGTERMs it hears. Slurm signals every
process of the step itself: each rank hears it once (its launcher passes nothing on), torchrun's agent exits 1 on
it, and the node reports a clean stop, so srun --kill-on-bad-exit does not kill rank 0 while it saves."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from cloudddp.backends.slurm.script import (
    CANCEL_MARK,
    CHAIN_MARK,
    ENDED_FILE,
    REQUEUE_MARK,
    START_MARK,
    STOPPED_NODE_MARK,
)
from tests.backends.slurm.test_preemption import (
    cloudddp,
    finished,
    job_id_of,
    metrics_in,
    run_dir,
    submit,
    wait_for,
)
from tests.support.cli import ROOT
from tests.support.slurm_cluster import GRACE_TIME, SHORT, SHORT_MINUTES, SPOT, URGENT, ClusterUser, SlurmCluster
from tests.support.waiting import LOADED

pytestmark = pytest.mark.slow

TRAINING = """
import json, os, signal, time
heard = 0
def on_term(*_):
    global heard
    heard += 1
    print(f"rank {os.environ['RANK']} heard SIGTERM {heard}", flush=True)
    if heard > 1:  # a second stop (a cancel during the grace): end at once
        os._exit(0)
signal.signal(signal.SIGTERM, on_term)  # before torch's import: a stop may come early
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
state = "state.json"  # checkpoint.files: the training's only checkpoint
kept = json.load(open(state)) if os.path.exists(state) else {}
step = kept.get("step", 0)
if kept.get("done"):  # a stop that came as it ended requeued a finished training: nothing is left to do
    print(f"rank {rank} finished already at step {step}", flush=True)
    raise SystemExit(0)
if rank == 0 and step:
    print(f"resumed from {state} at step {step}", flush=True)
last = min(STEPS, step + MORE) if step else STEPS  # a resumed run ends MORE steps later
while step < last:
    time.sleep(PACE)
    flag = torch.tensor([float(heard > 0)])
    dist.all_reduce(flag)  # every rank stops at the same step
    if flag.item() > 0:
        if rank == 0:
            print(f"saving at step {step}", flush=True)
            time.sleep(8)  # a slow save: the other nodes' ranks must not end the job meanwhile
            with open(state + ".tmp", "w") as f:
                json.dump({"step": step}, f)
            os.replace(state + ".tmp", state)
            print(f"saved at step {step}", flush=True)
        break
    step += 1
    if rank == 0:
        print("CLOUDDDP_METRIC " + json.dumps({"step": step}), flush=True)
if step == last and rank == 0:  # finished: its last checkpoint says so, as a training's final save does
    with open(state + ".tmp", "w") as f:
        json.dump({"step": step, "done": True}, f)
    os.replace(state + ".tmp", state)
dist.destroy_process_group()  # no barrier: the other ranks end while rank 0 saves (the template waits for it)
"""
HEARD = re.compile(r"rank (\d+) heard SIGTERM (\d+)")


def training(user: ClusterUser, name: str, steps: int, pace: float, resumed: int = 0, **more: Any) -> Path:
    """The training's folder and spec (2 nodes × 2 processes under torchrun, state.json kept): ``steps`` at
    ``pace`` seconds each, or once resumed ``resumed`` more."""
    code = user.home / name
    code.mkdir(exist_ok=True)
    text = TRAINING.replace("STEPS", str(steps)).replace("PACE", str(pace)).replace("MORE", str(resumed or steps))
    (code / "train.py").write_text(text)
    spec = code / "job.yaml"
    body = {
        "name": name,
        "code": {"dir": ".", "command": [user.python, "train.py"]},
        "resources": {"nodes": 2, "processes_per_node": 2},
        "checkpoint": {"files": ["state.json"]},
        **more,
    }
    spec.write_text(json.dumps(body))
    return spec


def node_logs(folder: Path) -> str:
    return "\n".join(log.read_text(errors="replace") for log in sorted((folder / "logs").glob("node*.log")))


def sigterms(folder: Path) -> dict[int, list[int]]:
    """Each rank's SIGTERM counts, as it printed them, over every run of the job."""
    heard: dict[int, list[int]] = {}
    for rank, count in HEARD.findall(node_logs(folder)):
        heard.setdefault(int(rank), []).append(int(count))
    return heard


def kept_folder(folder: Path) -> Path:
    script = (folder / "job.sbatch").read_text()
    found = re.search(r"^export CLOUDDDP_CHECKPOINT_DIR=(\S+)$", script, re.M)
    assert found, script
    return Path(found.group(1).strip("'")) / "files"


def preempt(cluster: SlurmCluster, folder: Path, tmp_path: Path) -> str:
    """Once the training has made 5 steps, a job of the higher-tier partition takes both nodes: its id."""
    wait_for("step 5", lambda: any((r.get("step") or 0) >= 5 for r in metrics_in(folder)))
    return cluster.sbatch(
        "-p", URGENT, "-N2", "--cpus-per-task=2", "-o", "urgent.log", "--wrap", "sleep 10", cwd=tmp_path
    )


def test_preempted_torchrun_ranks_hear_one_sigterm_save_their_kept_file_and_resume_every_step_once(
    slurm_cluster: SlurmCluster, user: ClusterUser, tmp_path: Path
) -> None:
    """GraceTime 60 and KillWait 5: the script is told 5 s (the smaller), torchrun's agent waits 60 s; rank 0's 8 s
    save completes (the node whose agent exited 1 on SIGTERM exits 0), the launcher saves state.json into the kept
    folder before the job is requeued, and the requeued run resumes from it."""
    steps = 50
    spec = training(user, "stops-preempt", steps, 0.2, slurm={"partition": SPOT})
    run_id = submit(user, spec, f"slurm.grace_time={GRACE_TIME}")
    folder = run_dir(user, run_id)
    script = (folder / "job.sbatch").read_text()
    waits = re.search(r"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=(\d+)", script)
    assert "export CLOUDDDP_SIGTERM_GRACE=5" in script and waits and int(waits.group(1)) >= GRACE_TIME, script
    job = job_id_of(slurm_cluster, run_id)
    urgent = preempt(slurm_cluster, folder, tmp_path)
    slurm_cluster.wait_job(urgent, {"RUNNING"}, timeout=GRACE_TIME + 30)
    requeued = slurm_cluster.job(job)
    assert (requeued["JobState"], requeued["Restarts"]) == ("PENDING", "1"), requeued
    saved = re.findall(r"saved at step (\d+)", node_logs(folder))
    assert len(saved) == 1, node_logs(folder)[-3000:]
    kept = json.loads((kept_folder(folder) / "state.json").read_text())  # while the urgent job holds the nodes
    assert kept == {"step": int(saved[0])}, kept

    status = finished(user, run_id)
    assert status["message"] == "finished after 1 requeue: preemption", status
    logs = node_logs(folder)
    assert f"resumed from state.json at step {saved[0]}" in logs and STOPPED_NODE_MARK in logs, logs[-3000:]
    assert sigterms(folder) == {rank: [1] for rank in range(4)}, "each rank heard Slurm's SIGTERM once"
    records = [json.loads(line) for line in cloudddp(user, "metrics", run_id, "--json").splitlines()]
    assert [r["step"] for r in records] == list(range(1, steps + 1)), "every step exactly once, none lost"


def test_a_job_cancelled_during_its_preemption_grace_ends_cancelled_and_is_never_requeued(
    slurm_cluster: SlurmCluster, user: ClusterUser, tmp_path: Path
) -> None:
    """scancel while rank 0 saves after a preemption: the training ends at once (a second SIGTERM), the batch script
    sees the job CANCELLED and does not requeue it (scontrol requeue would accept it), and status says cancelled."""
    spec = training(user, "stops-cancel", 200, 0.2, slurm={"partition": SPOT})
    run_id = submit(user, spec, f"slurm.grace_time={GRACE_TIME}")
    folder = run_dir(user, run_id)
    job = job_id_of(slurm_cluster, run_id)
    preempt(slurm_cluster, folder, tmp_path)
    wait_for("rank 0 saving", lambda: "saving at step" in node_logs(folder), timeout=GRACE_TIME)
    done = user.run(["scancel", job])
    assert done.returncode == 0, done.stderr
    slurm_cluster.wait_job(job, {"CANCELLED", "COMPLETED", "FAILED", "PENDING"}, timeout=30)
    status = json.loads(cloudddp(user, "status", run_id, "--json"))
    batch = (folder / "batch.log").read_text()
    assert (status["state"], status["details"]["restarts"]) == ("cancelled", 0), (status, batch[-3000:])
    assert REQUEUE_MARK not in batch and batch.count(START_MARK) == 1, batch[-3000:]
    # A script that reached its end says why it did not requeue; on a loaded machine KillWait's SIGKILL (5 s here)
    # can end it first, which leaves no end record (test_script_requeue.py checks the decision itself).
    assert CANCEL_MARK in batch or not (folder / ENDED_FILE).exists(), batch[-3000:]


@pytest.mark.timeout(2 * LOADED + 300)
def test_a_training_longer_than_its_partitions_time_limit_runs_as_a_chain_of_requeues(
    slurm_cluster: SlurmCluster, user: ClusterUser
) -> None:
    """limits.max_runtime 10 min on a partition whose MaxTime is 1 min: the job asks for 1 min; at Slurm's
    warning signal the training checkpoints (an 8 s save: torchrun's agent waits the lead, not KillWait) and the
    script requeues the job, and the next allocation resumes (and ends 10 steps later), every step once; no rank
    heard a stop twice. doctor says what to set when the partition's limit is not given. Slurm's timer may warn
    anywhere in the allocation's first 30 s, so the training runs until it is stopped, however late."""
    spec = training(user, "chain", 100000, 0.25, resumed=10, limits={"max_runtime": "10m"}, slurm={"partition": SHORT})
    told = user.run(
        [user.python, "-m", "cloudddp", "doctor", str(spec), "-b", "slurm", *("-o", "slurm.kill_wait=5")],
        env=user.env(CLOUDDDP_HOME=str(user.home / ".cloudddp"), PYTHONPATH=str(ROOT), COLUMNS="200"),
    )
    said = " ".join(told.stdout.split())
    assert told.returncode == 2 and "longer than partition short's MaxTime" in said, said + told.stderr[-2000:]
    assert f"set slurm.partition_time_limit: {SHORT_MINUTES}m" in said, said

    run_id = submit(user, spec, f"slurm.partition_time_limit={SHORT_MINUTES}m")
    folder = run_dir(user, run_id)
    script = (folder / "job.sbatch").read_text()
    assert "#SBATCH --time=0-00:01:00" in script and "budget=600 link=60" in script
    assert "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=30" in script  # the lead (half the allocation), not KillWait's 5 s
    status = finished(user, run_id, timeout=2 * LOADED)  # two allocations and a requeue
    details = status["details"]
    restarts = details["restarts"]
    assert restarts >= 1, status
    assert details["requeue_reasons"] == ["the partition's time limit (a chain of allocations)"] * restarts, details
    batch = (folder / "batch.log").read_text()
    assert batch.count(CHAIN_MARK) == restarts and batch.count(START_MARK) == restarts + 1, batch[-3000:]
    assert 0 < int((folder / ".cloudddp-used-seconds").read_text()) < 600
    logs = node_logs(folder)
    saved = max(int(step) for step in re.findall(r"saved at step (\d+)", logs) or ["0"])  # the last save
    assert saved and f"resumed from state.json at step {saved}" in logs, logs[-3000:]
    heard = sigterms(folder)
    assert heard and all(set(counts) == {1} for counts in heard.values()), heard  # one SIGTERM per rank per stop
    records = [json.loads(line) for line in cloudddp(user, "metrics", run_id, "--json").splitlines()]
    steps = [r["step"] for r in records]
    assert steps == list(range(1, saved + 11)), "every step exactly once, over allocations"
