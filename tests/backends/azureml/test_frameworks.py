"""The conformance matrix, Azure ML cell: the Hugging Face Trainer project of ``examples/`` as it is, a
low-priority job on 2 nodes run for real (tests/support/azure_nodes.py: the job the offline workspace received,
under Azure ML's PyTorch distribution), its nodes taken back mid-training, the recovery's resubmit resuming from the
``checkpoint-N`` cloudddp's hooks made the Trainer write on the eviction notice (the script has no stop handling
of its own), and the Trainer's own printed log records read back by ``cloudddp metrics --json``. Each rank trains,
across both attempts, sample by sample what it trains in one uninterrupted run of the same world (local 1×2).

The Trainer is most at risk here: it has no stop handling of its own, its ranks sit on two nodes that must agree
on the step to save at, and Azure ML gives each process's output its own log file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudddp.api import Job, Run
from tests.backends.azureml.test_recovery import rig, submitted
from tests.support import sample_trace
from tests.support.azure_launchers import Datastores
from tests.support.azure_nodes import AzureNodes
from tests.support.azure_rig import WorkspaceModel
from tests.support.cli import cli
from tests.support.frameworks import steps_in, succeeded, traced
from tests.support.harnesses import AzureMLHarness
from tests.support.waiting import LOADED, wait_until

pytestmark = pytest.mark.slow
__all__ = ["rig"]  # the workspace over HTTP, shared with the recovery tests

STEPS = 30
EPOCH = 512 // 8 // 2
"""Steps an epoch: 512 samples, batches of 8, 2 ranks."""
LOGGED = "{'loss'"
"""The start of the Trainer's printed log record (every 5 steps): training runs, the moment to take the nodes."""


ARGS = ["--output_dir", "{{checkpoint_dir}}", "--max_steps", str(STEPS), "--save_steps", "1000"]


def trainer_job(root: Path) -> Path:
    """The example's job.yaml on 2 low-priority nodes of the rig's workspace, recovered once; no periodic save,
    so a resume can only come from the stop's own checkpoint."""
    spec = traced("huggingface", root, [*ARGS, "--step_sleep", "0.1"])
    job: dict[str, Any] = yaml.safe_load(spec.read_text())
    job["code"]["dir"] = str(spec.parent)
    job["resources"] = {"nodes": 2, "gpus_per_node": 0, "processes_per_node": 1, "spot": True}
    job["limits"] = {"max_recoveries": 1, "max_runtime": "10m"}
    job["env"]["OMP_NUM_THREADS"] = "1"  # 2 processes on this 2-core machine: torch's own threads slow them 10×
    overrides = dict(o.split("=", 1) for o in AzureMLHarness.overrides)
    job["azureml"] = {key.removeprefix("azureml."): value for key, value in overrides.items()}
    spec.write_text(yaml.safe_dump(job, sort_keys=False))
    return spec


def loss_steps(records: list[dict[str, Any]]) -> list[int]:
    """The steps of the loss records: the Trainer prints its epoch (a fraction), not its step."""
    return [round(r["epochs"] * EPOCH) for r in records if "loss" in r]


def shown(run_id: str) -> list[dict[str, Any]]:
    """The records ``cloudddp metrics --json`` prints."""
    done = cli("metrics", run_id, "--json")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.timeout(LOADED + 300)
def test_the_trainer_on_2_nodes_saves_its_checkpoint_on_preemption_and_the_recovery_resumes_from_it(
    rig: WorkspaceModel, tmp_path: Path
) -> None:
    whole = traced("huggingface", tmp_path / "whole", ARGS, local={"nodes": 1, "processes_per_node": 2})
    expected = sample_trace.steps(succeeded(Job.load(whole).submit("local")))
    first = submitted(trainer_job(tmp_path))
    stores = Datastores(tmp_path / "blob")
    nodes = AzureNodes(rig, first, tmp_path / "attempt1", stores)
    preempted = nodes.preempt_once_logged(LOGGED)
    [saved] = [p.name for p in nodes.checkpoints.glob("checkpoint-*")]
    stopped_at = int(saved.removeprefix("checkpoint-"))
    assert 5 <= stopped_at < STEPS, preempted.describe()
    state = json.loads((nodes.checkpoints / saved / "trainer_state.json").read_text())
    assert state["global_step"] == stopped_at
    before = loss_steps([r.to_dict() for r in Run.attach(first).metrics()])  # what the command below reads
    assert before and before[-1] <= stopped_at, before

    second = wait_until(lambda: f"{first}-r2" in rig.jobs and f"{first}-r2", 60)
    finished = AzureNodes(rig, second, tmp_path / "attempt2", stores).finish(timeout=180)
    assert finished.ok, finished.describe()
    log = "\n".join(finished.logs.values())
    assert steps_in(r"finished at step (\d+)", log) == [STEPS, STEPS], finished.describe()
    trained, resumed = sample_trace.steps("\n".join(preempted.logs.values())), sample_trace.steps(log)
    assert all(trained[r] + resumed[r] == expected[r] for r in (0, 1)), (stopped_at, len(trained[0]))
    # The chain's records (one run id for both attempts): the first attempt's, then the second's from the saved
    # step on. A resume from scratch would log steps 5.. again; one that skipped the save, none up to it.
    chain = loss_steps(shown(first))
    assert chain == [*before, *range(stopped_at // 5 * 5 + 5, STEPS + 1, 5)], (stopped_at, before, chain)
