"""The conformance matrix, Slurm cells (torchrun, 2 nodes × 2 processes, an unprivileged user on the rig of
tests/support/slurm_cluster.py): the Lightning example as it is, and a tutorial-style DDP script with
``DataLoader(num_workers=2)``, each trained, stopped, resumed from its own checkpoint, with its metrics in
``cloudddp metrics --json``.

Slurm signals every process of a step itself, DataLoader workers included (docs/stopping.md): neither script does
anything about it (no ``worker_init_fn``), cloudddp's hooks in each rank's process make the workers ignore it.
Lightning is stopped by a preemption (Slurm's own stop, the one a cluster user meets without asking: the 60 s
grace, then a requeue that must find ``last.ckpt`` at the path it was written to); the DataLoader script by
``cloudddp cancel`` (KillWait: 5 s to save) and a resubmit, which must find its checkpoint under the same job name,
once from its stop's own save and once from the file it keeps in its working folder (``checkpoint.files``).
"""

from __future__ import annotations

import csv
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from cloudddp.api import Job
from tests.backends.slurm.test_preemption import cloudddp, finished, job_id_of, metrics_in, run_dir, submit, wait_for
from tests.backends.slurm.test_stops import kept_folder, node_logs
from tests.support import dataloader_saver, sample_trace
from tests.support.frameworks import EXAMPLES, project, steps_in, succeeded, traced
from tests.support.slurm_cluster import GRACE_TIME, SPOT, URGENT, ClusterUser, SlurmCluster
from tests.support.waiting import LOADED

pytestmark = pytest.mark.slow

LIGHTNING_STEPS = 42
"""3 epochs of 14 steps: 1792 samples, batches of 32, 4 ranks."""


def heard_the_cancel(logs: str) -> bool:
    """Every rank heard the cancel, once or twice: ``slurmstepd`` signals it, and ``srun``, signalled too, terminates
    the step, which signals it again; the two often coalesce (docs/stopping.md, "A cancel can reach a rank twice")."""
    heard = dataloader_saver.sigterms(logs)
    return set(heard) == set(range(4)) and all(count in (1, 2) for count in heard.values())


def records(user: ClusterUser, run_id: str) -> list[dict[str, Any]]:
    """The run's records as the user's ``cloudddp metrics --json`` prints them."""
    return [json.loads(line) for line in cloudddp(user, "metrics", run_id, "--json").splitlines()]


def logged_steps(folder: Path, name: str) -> list[int]:
    """The steps of ``name``'s rows in every CSVLogger file under ``folder`` (each run of the job writes its own
    ``version_N/metrics.csv``)."""
    rows = [row for path in folder.rglob("metrics.csv") for row in csv.DictReader(path.open())]
    return sorted(int(row["step"]) for row in rows if row.get(name))


def preempt(cluster: SlurmCluster, folder: Path, tmp_path: Path) -> None:
    """Once metrics.csv's rows have reached step 5, a 3 s job of the higher-tier partition takes both nodes; back
    when Slurm has requeued the training."""
    wait_for("step 5", lambda: any((r.get("step") or 0) >= 5 for r in metrics_in(folder)))
    urgent = cluster.sbatch(
        "-p", URGENT, "-N2", "--cpus-per-task=2", "-o", "urgent.log", "--wrap", "sleep 3", cwd=tmp_path
    )
    cluster.wait_job(urgent, {"RUNNING", "COMPLETED"}, timeout=GRACE_TIME + 30)


def checkpoint_dir(folder: Path) -> Path:
    """The job's checkpoint folder as its batch script names it (``{{checkpoint_dir}}``)."""
    found = re.search(r"^export CLOUDDDP_CHECKPOINT_DIR=(\S+)$", (folder / "job.sbatch").read_text(), re.M)
    assert found, (folder / "job.sbatch").read_text()
    return Path(found.group(1).strip("'"))


@pytest.mark.timeout(LOADED + 300)
def test_lightning_preempted_on_2x2_saves_last_ckpt_and_its_requeue_resumes_there_with_metrics_from_metrics_csv(
    slurm_cluster: SlurmCluster, user: ClusterUser, tmp_path: Path
) -> None:
    """The example's job.yaml with shorter arguments (the script knows nothing of cloudddp): Lightning's
    num_nodes × devices is the world torchrun started (``{{nodes}}``, ``{{processes_per_node}}``), the
    preemption's SIGTERM ends the fit on every rank with ``last.ckpt`` at a step every rank agreed on (cloudddp's
    hooks; no periodic checkpoint before it), no DataLoader worker dies of Slurm's SIGTERM, the requeued allocation
    restores that file, skips the batches the interrupted epoch had trained and ends at step 42, each rank having
    trained exactly what it trains in an uninterrupted run of the same world (local 2×2), sample by sample, and
    metrics.csv's train_loss rows reach ``cloudddp metrics`` each once, in step order."""
    args = ["--num-nodes", "{{nodes}}", "--devices", "{{processes_per_node}}", "--root", "{{checkpoint_dir}}"]
    epochs = ["--max-epochs", "3", "--every-n-steps", "1000"]
    whole = traced("lightning", tmp_path / "whole", [*args, *epochs], local={"nodes": 2, "processes_per_node": 2})
    expected = sample_trace.steps(succeeded(Job.load(whole).submit("local")))
    assert [len(expected[r]) for r in range(4)] == [LIGHTNING_STEPS] * 4, expected.keys()
    shorter = [*epochs, "--step-sleep", "0.3"]
    spec = traced("lightning", user.home, [*args, *shorter], slurm={"partition": SPOT})
    run_id = submit(user, spec, f"slurm.grace_time={GRACE_TIME}")
    folder = run_dir(user, run_id)
    job = job_id_of(slurm_cluster, run_id)
    preempt(slurm_cluster, folder, tmp_path)
    assert slurm_cluster.job(job)["Restarts"] == "1", node_logs(folder)[-3000:]
    kept = sorted(checkpoint_dir(folder).rglob("*"))
    assert [p.name for p in kept if p.suffix == ".ckpt"] == ["last.ckpt"], (kept, node_logs(folder)[-5000:])
    [last] = (p for p in kept if p.suffix == ".ckpt")  # the stop's, and the only one
    saved = torch.load(last, map_location="cpu", weights_only=False)["global_step"]
    assert last.name == "last.ckpt" and 5 <= saved < LIGHTNING_STEPS, (last, saved)

    finished(user, run_id)
    logs = node_logs(folder)
    assert f"Restored all states from the checkpoint at {last}" in logs, logs[-3000:]
    stops = steps_in(r"cloudddp: stopped at step (\d+): saved \S+/last\.ckpt", logs)
    assert stops == [saved] * 4, logs[-3000:]  # all agreed
    assert steps_in(r"finished at step (\d+)", logs) == [LIGHTNING_STEPS] * 4, logs[-3000:]  # every rank
    assert "killed by signal" not in logs and "last-v1.ckpt" not in logs, logs[-3000:]
    trained = sample_trace.steps(logs)  # each node's log holds both allocations, in order
    differ = {
        r: next((i for i, (a, b) in enumerate(zip(trained[r], expected[r], strict=False)) if a != b), None)
        for r in range(4)
    }
    assert all(trained[r] == expected[r] for r in range(4)), (saved, differ)  # the first step that differs
    steps = [r["step"] for r in records(user, run_id) if "train_loss" in r]
    assert steps == logged_steps(checkpoint_dir(folder), "train_loss"), steps  # each row once, the last ones too
    assert steps == sorted(set(steps)) and steps[-1] >= LIGHTNING_STEPS - 5, steps  # none doubled by the resume
    resumed = [s for s in steps if s > saved]
    assert resumed and resumed[0] <= saved + 5, (saved, steps)  # a row every 5 steps: the first after the save


@pytest.mark.timeout(240)
def test_a_dataloader_script_cancelled_on_2x2_saves_and_its_resubmit_resumes_with_its_printed_loss_as_metrics(
    user: ClusterUser,
) -> None:
    """``cloudddp cancel`` (SIGTERM to every process of the step, SIGKILL 5 s later): each rank hears it (once or
    twice), no worker dies (the script's loader has no ``worker_init_fn``: cloudddp's hooks spare its workers), rank 0
    saves; the resubmit under the same name resumes at the saved step on every rank and trains 10 more; the loss
    the script prints is each run's metric, at each step once."""
    code = dataloader_saver.dataloader_saver_code(user.home)

    def job(steps: int) -> Path:
        return dataloader_job(code, steps, ["--save-delay", "1"])

    first = submit(user, job(400))
    wait_for("training", lambda: dataloader_saver.RUNNING in node_logs(run_dir(user, first)))
    cloudddp(user, "cancel", first)
    logs = node_logs(run_dir(user, first))
    assert not dataloader_saver.WORKER_KILLED.search(logs), logs[-3000:]
    assert heard_the_cancel(logs), logs[-3000:]
    [(saved, epoch)] = dataloader_saver.saved(logs)
    before = [r["step"] for r in records(user, first) if "loss" in r]
    assert before == list(range(1, saved + 1)), (saved, before)

    second = submit(user, job(10))
    finished(user, second)
    logs = node_logs(run_dir(user, second))
    assert dataloader_saver.resumed(logs) == dict.fromkeys(range(4), (saved, epoch)), logs[-3000:]
    assert f"rank 0 finished at step {saved + 10} " in logs, logs[-3000:]
    after = [r["step"] for r in records(user, second) if "loss" in r]
    assert after == list(range(saved + 1, saved + 11)), after


def dataloader_job(code: Path, steps: int, args: list[str], **spec: Any) -> Path:
    """A job.yaml for the DataLoader script in ``code``: 2 × 2, steps of 0.1 s, ``args`` added, ``spec`` over it."""
    path = code / f"job-{steps}-{len(args)}.yaml"
    body = {
        "name": "dataloader-saver",
        "code": {
            "dir": ".",
            "entry": dataloader_saver.ENTRY,
            "args": ["--steps", str(steps), "--step-time", "0.1", *args],
        },
        "resources": {"nodes": 2, "processes_per_node": 2},
        "checkpoint": {"enabled": True},
        "metrics": dataloader_saver.METRICS,
        **spec,
    }
    path.write_text(json.dumps(body))
    return path


@pytest.mark.timeout(240)
def test_a_plain_loop_cancelled_on_2x2_keeps_the_file_it_renamed_into_place_3_s_before_and_resumes_from_it(
    user: ClusterUser,
) -> None:
    """The script saves ``state.pt`` in its working folder every 80 steps (a temporary file renamed over it, which
    replaces ``checkpoint.files``' link), and its stop's own save takes longer than Slurm's KillWait (5 s), so
    only the periodic save can carry the run on. Cancelled 3 s after one: the kept copy is that save's (kept
    within seconds, not at the program's end, which the SIGKILL never lets come), no DataLoader worker dies (no
    ``worker_init_fn``), and the resubmit resumes at its step on every rank."""
    code = dataloader_saver.dataloader_saver_code(user.home / "kept")
    keep = {"checkpoint": {"enabled": True, "files": ["state.pt"]}}
    first = submit(user, dataloader_job(code, 2000, ["--save-every", "80", "--save-delay", "60"], **keep))
    folder = run_dir(user, first)
    wait_for("a kept save", lambda: dataloader_saver.kept(node_logs(folder)))
    time.sleep(3)
    cloudddp(user, "cancel", first)
    logs = node_logs(folder)
    [*_, (step, epoch)] = dataloader_saver.kept(logs)
    assert not dataloader_saver.saved(logs), "the stop's own save outlived Slurm's KillWait: nothing to prove"
    assert not dataloader_saver.WORKER_KILLED.search(logs) and "Traceback" not in logs, logs[-3000:]
    assert heard_the_cancel(logs), logs[-3000:]
    kept = torch.load(kept_folder(folder) / "state.pt", map_location="cpu")
    assert kept["step"] == step, (kept["step"], step)

    second = submit(user, dataloader_job(code, 10, ["--save-every", "80"], **keep))
    finished(user, second)
    logs = node_logs(run_dir(user, second))
    assert dataloader_saver.resumed(logs) == dict.fromkeys(range(4), (step, epoch)), logs[-3000:]


@pytest.mark.conformance
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("name", "final"), [("huggingface", 60), ("accelerate", 48)])
def test_the_other_examples_train_on_slurm_unchanged(
    name: str, final: int, slurm_cluster: SlurmCluster, user: ClusterUser
) -> None:
    """The Trainer's and Accelerate's job.yaml as they are (their own arguments), 2 nodes × 2 processes under
    torchrun: both end where one world of 4 ends (``make conformance``; the matrix's Slurm cells stop and resume
    Lightning and the DataLoader script)."""
    spec = project(name, user.home, example_args(name))
    run_id = submit(user, spec)
    finished(user, run_id)
    logs = node_logs(run_dir(user, run_id))
    assert steps_in(r"finished at step (\d+)", logs)[-1:] == [final], logs[-3000:]


def example_args(name: str) -> list[str]:
    """The arguments the example's own job.yaml gives."""
    return list(yaml.safe_load((EXAMPLES / name / "job.yaml").read_text())["code"]["args"])
