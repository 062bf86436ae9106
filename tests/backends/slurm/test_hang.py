"""A hang on the real Slurm cluster (tests/support/slurm_cluster.py): one rank of a 1 × 2 job sleeps in the middle
of an epoch while the other waits in DDP's all-reduce. The attempt ends with cause ``hang`` naming that rank and the
Slurm node it ran on (the hang doctor in every rank, cloudddp/injob/hang.py); the recovery's next attempt is
submitted with ``--exclude`` of that node, runs on the other one and resumes from the checkpoint."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cloudddp.api import Job, Run
from cloudddp.backends.status import Cause, RunState
from tests.backends.slurm.test_runs import ON_CLUSTER, cluster  # noqa: F401 - the fixture
from tests.support.slurm_cluster import SlurmCluster

pytestmark = pytest.mark.slow
TIMEOUT_S = 10
SCRIPT = """\
import datetime, os, time
import torch, torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(os.environ["CLOUDDDP_COLLECTIVE_TIMEOUT"])))
rank, node = dist.get_rank(), os.environ["SLURMD_NODENAME"]
saved = os.path.join(os.environ["CLOUDDDP_CHECKPOINT_DIR"], "step.pt")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
start = torch.load(saved)["step"] + 1 if os.path.exists(saved) else 0
print(f"rank {rank} on {node} starts at step {start}", flush=True)
for step in range(start, 12):
    if rank == 1 and step == 5 and not os.environ["CLOUDDDP_RUN_ID"].endswith("-r2"):
        time.sleep(3600)
    optimizer.zero_grad()
    model(torch.ones(8, 4)).sum().backward()
    optimizer.step()
    if rank == 0:
        torch.save({"step": step}, saved + ".tmp")
        os.replace(saved + ".tmp", saved)
print(f"rank {rank} on {node} done", flush=True)
"""
SLEEP_LINE = 14


def test_a_hung_rank_names_its_node_and_the_recovery_runs_without_that_node_from_the_checkpoint(
    cluster: SlurmCluster,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CLOUDDDP_RECOVERY_POLL", "0.5")
    (tmp_path / "train.py").write_text(SCRIPT)
    assert "time.sleep(3600)" in SCRIPT.splitlines()[SLEEP_LINE - 1]
    job = Job.from_dict(
        {
            "name": "slurm-hang",
            "code": {"dir": str(tmp_path), "entry": "train.py"},
            "resources": {"nodes": 1, "processes_per_node": 2},
            "distribution": {"collective_timeout": f"{TIMEOUT_S}s"},
            "checkpoint": {"resume": "auto"},
            "limits": {"max_recoveries": 1},
        },
        overrides=[*ON_CLUSTER, "slurm.requeue=false"],
    )
    run = job.submit("slurm", poll_seconds=0.2)
    first = run.run_id
    deadline = time.monotonic() + 180
    while not (hung := run.backend.status(first)).state.terminal:
        assert time.monotonic() < deadline, hung
        time.sleep(0.5)
    said_first = "\n".join(line.text for line in run.backend.logs(first))
    assert hung.state is RunState.FAILED and hung.cause is Cause.HANG, (hung, said_first[-4000:])
    culprit_node = hung.details["failure"]["culprit_host"]
    assert culprit_node in ("node1", "node2"), hung.details
    assert hung.message.startswith(f"hang: rank 1 on node 0 ({culprit_node}): train.py:{SLEEP_LINE} in <module>"), (
        hung.message
    )
    assert "rank 0: waiting in backward" in hung.message, hung.message

    status = run.wait(timeout=180, poll=0.5)
    assert status.state is RunState.SUCCEEDED, status
    attempts = status.details["attempts"]
    assert [(a["state"], a["cause"]) for a in attempts] == [("failed", "hang"), ("succeeded", None)], attempts
    assert attempts[1]["left_out"] == [culprit_node], attempts
    second = Run(attempts[1]["run_id"], run.backend)
    said = [line.text for line in second.logs() if " on node" in line.text]
    other = "node2" if culprit_node == "node1" else "node1"
    resumed = sorted(t for t in said if "starts at step" in t and not t.endswith(" step 0"))  # the second's
    assert resumed == [f"rank 0 on {other} starts at step 5", f"rank 1 on {other} starts at step 5"], said
    assert f"rank 0 on {other} done" in said, said
