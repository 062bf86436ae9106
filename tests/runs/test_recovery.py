"""Recovery without anyone watching: a run ended by something the job did not cause is submitted again by
a detached watcher, after the submitting CLI has exited, and resumes from its checkpoint; a failure of the
job's own code is never retried."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
import torch

from cloudddp.api import Job, Run
from cloudddp.backends.status import RunState
from cloudddp.catalog.ranking import ranked_sizes
from cloudddp.runs import recovery
from cloudddp.runs.runner import get_backend
from tests.support.aws_emulator import aws_environment, put_logs, set_status
from tests.support.cli import ROOT, cli
from tests.support.faults import kill_node
from tests.support.harnesses import TINY, SageMakerHarness
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow
DIGITS = ROOT / "jobs" / "digits-local.yaml"
FAST = {"CLOUDDDP_RECOVERY_POLL": "0.5"}


def model_of(run_dir: str) -> dict[str, torch.Tensor]:
    return torch.load(Path(run_dir) / "outputs" / "model.pt", map_location="cpu")


@pytest.mark.timeout(600)
def test_a_lost_node_group_is_recovered_after_the_cli_exits_and_the_model_is_bitwise_equal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CLOUDDDP_RECOVERY_POLL", "0.5")
    args = [
        "-o",
        "code.args=[--dataset, digits, --epochs, '3', --deterministic, --log-every, '1']",
        "-o",
        "local.nodes=2",
        "-o",
        "local.processes_per_node=1",
        "-o",
        "checkpoint.resume=auto",
    ]
    clean = cli("submit", str(DIGITS), *args, "-o", "name=recover-clean", "--detach", "--quiet")
    assert clean.returncode == 0, clean.stderr
    clean_run = Run.attach(clean.stdout.strip())
    assert clean_run.wait(timeout=300, poll=0.5).state is RunState.SUCCEEDED

    faulty = cli(
        "submit", str(DIGITS), *args, "-o", "name=recover-faulty", "--detach", "--quiet", "--recover", "2", env=FAST
    )
    assert faulty.returncode == 0, faulty.stderr  # the CLI has exited; the watcher goes on
    run = Run.attach(faulty.stdout.strip())
    first = run.chain.current.run_id
    # Once epoch 2 is checkpointed, the whole of node 1 (its torchrun agent and its rank) is killed.
    wait_until(lambda: any(r.epoch == 2 and "test_acc" in r.values for r in run.backend.metrics(first)))
    kill_node(run.status().details["run_dir"], 1)

    status = run.wait(timeout=300, poll=0.5)
    assert status.state is RunState.SUCCEEDED, status
    attempts = status.details["attempts"]
    assert [a["state"] for a in attempts] == ["failed", "succeeded"] and attempts[0]["cause"] == "infrastructure"
    assert "node 1 was lost" in attempts[0]["reason"]
    second = Run.attach(attempts[1]["run_id"])
    assert any("resumed from" in line.text for line in second.logs())
    # The metric stream of the whole chain has every epoch once, and the model is the uninterrupted one's.
    assert [r.epoch for r in run.metrics() if "test_acc" in r.values] == [1, 2, 3]

    def train_steps(of: Run) -> list[int | None]:
        return [r.step for r in of.metrics() if "train_loss" in r.values]

    assert train_steps(run) == train_steps(clean_run)  # every step once, as the uninterrupted run reported them
    clean_model, model = model_of(clean_run.status().details["run_dir"]), model_of(second.status().details["run_dir"])
    assert clean_model.keys() == model.keys() and all(torch.equal(clean_model[k], model[k]) for k in model)
    shown = cli("status", run.run_id)
    assert "attempts" in shown.stdout and "infrastructure" in shown.stdout


def test_a_failure_of_the_scripts_own_code_is_not_retried() -> None:
    result = cli("submit", str(TINY), "-o", "code.args=[--epochs, 5, --fail-rank, 1]", "--recover", "2", env=FAST)
    assert result.returncode == 1
    run_id = result.stderr.split("submitted ")[1].split()[0]
    run = Run.attach(run_id)
    status = wait_until(lambda: (s := run.status()).details.get("recovery") != "watching" and s, timeout=60)
    assert status.state is RunState.FAILED and len(status.details["attempts"]) == 1
    assert status.details["attempts"][0]["cause"] == "user error" and "not recovered" in status.message


def test_sagemaker_capacity_errors_are_resubmitted_and_an_algorithm_error_is_not(
    moto_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in aws_environment(moto_url).items():
        monkeypatch.setenv(key, value)
    job = SageMakerHarness(moto_url).overrides
    result = cli(
        "submit",
        str(TINY),
        "-b",
        "sagemaker",
        *[a for o in job for a in ("-o", o)],
        "--detach",
        "--quiet",
        "--recover",
        "3",
        env=FAST,
    )
    assert result.returncode == 0, result.stderr
    run = Run.attach(result.stdout.strip())
    first = run.chain.current.run_id
    set_status(first, "Failed", "Failed", reason="CapacityError: Unable to provision requested ML compute capacity.")
    second = wait_until(lambda: len(run.chain.attempts) == 2 and run.chain.current.run_id)
    assert second == f"{first}-r2"
    tags = {
        t["Key"]: t["Value"]
        for t in run.backend._client("sagemaker", "us-east-1").list_tags(
            ResourceArn=run.backend._client("sagemaker", "us-east-1").describe_training_job(TrainingJobName=second)[
                "TrainingJobArn"
            ]
        )["Tags"]
    }
    assert tags["cloudddp:attempt"] == "2"
    put_logs(second, "algo-1", ["Traceback (most recent call last):", "ValueError: bad"], 0)
    set_status(second, "Failed", "Failed", reason="AlgorithmError: ExecuteUserScriptError: ValueError: bad")
    status = wait_until(lambda: (s := run.status()).details.get("recovery") != "watching" and s, timeout=60)
    assert status.state is RunState.FAILED and len(status.details["attempts"]) == 2
    assert (
        status.details["attempts"][0]["cause"] == "capacity" and status.details["attempts"][1]["cause"] == "user error"
    )
    shown = cli("status", run.run_id)
    assert "not recovered" in shown.stdout and "AlgorithmError" in shown.stdout


def test_capacity_failures_move_a_sagemaker_recovery_to_the_next_size_of_the_ranking(
    moto_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """limits.recover_to: next_size with capacity_tries 1: each capacity failure moves the next attempt to the
    next size of the plan's ranking (the request's InstanceType changes), and the chain says so."""
    for key, value in aws_environment(moto_url).items():
        monkeypatch.setenv(key, value)
    overrides = [
        *SageMakerHarness(moto_url).overrides,
        "resources.gpus_per_node=1",
        "sagemaker.instance_type=ml.g5.xlarge",
        "limits.recover_to=next_size",
        "limits.capacity_tries=1",
    ]
    job = Job.load(TINY, overrides)
    sagemaker = get_backend("sagemaker")
    _, ranking = ranked_sizes(sagemaker.size_target(job.spec), job.spec)
    result = cli(
        "submit",
        str(TINY),
        "-b",
        "sagemaker",
        *[a for o in overrides for a in ("-o", o)],
        "--recover",
        "3",
        "--detach",
        "-y",
        env=FAST,
    )
    assert result.returncode == 0, result.stderr
    assert f"it moves to {ranking[0]}, then {ranking[1]}" in result.stderr, result.stderr
    submitted = re.search(r"submitted (\S+)", result.stderr)
    assert submitted, result.stderr
    run = Run.attach(submitted.group(1))
    client = run.backend._client("sagemaker", "us-east-1")

    def instance_type(run_id: str) -> str:
        return client.describe_training_job(TrainingJobName=run_id)["ResourceConfig"]["InstanceType"]

    assert instance_type(run.run_id) == "ml.g5.xlarge"
    for number, size in ((2, ranking[0]), (3, ranking[1])):
        set_status(run.chain.current.run_id, "Failed", "Failed", reason="CapacityError: Unable to provision ...")
        current = wait_until(lambda n=number: len(run.chain.attempts) == n and run.chain.current)
        assert (current.size, instance_type(current.run_id)) == (size, size)
        assert f"on {size} after 1 capacity failure on " in run.chain.message, run.chain.message
    set_status(run.chain.current.run_id, "Completed", "Completed")
    status = wait_until(lambda: (s := run.status()).state.terminal and s, timeout=60)
    assert status.state is RunState.SUCCEEDED
    assert [a["size"] for a in status.details["attempts"]] == ["ml.g5.xlarge", ranking[0], ranking[1]]


@pytest.mark.slow
def test_a_watcher_that_died_is_started_again_by_recover_and_finishes_the_chain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The watcher is killed, then the run loses a node while no watcher is alive: the one `recover` starts
    again finds the failed attempt and resubmits it, and the chain succeeds on attempt 2."""
    monkeypatch.setenv("CLOUDDDP_RECOVERY_POLL", "0.5")
    overrides = ["code.args=[--epochs, 12, --sleep, 0.3]", "local.nodes=2", "local.processes_per_node=1"]
    run = Job.load(TINY, [*overrides, "limits.max_recoveries=1"]).submit("local")
    chain = run.chain
    assert chain is not None and chain.watcher_pid
    first = chain.current.run_id
    os.kill(chain.watcher_pid, signal.SIGKILL)  # what a reboot or an OOM kill does to it
    wait_until(lambda: not recovery.Chain.load(chain.chain_id).watcher_alive(), timeout=30)
    next(iter(run.backend.metrics(first, follow=True)))  # it trains
    kill_node(run.backend.status(first).details["run_dir"], 1)
    assert (
        wait_until(lambda: (s := run.backend.status(first)).state.terminal and s, timeout=60).state is RunState.FAILED
    )
    result = cli("recover", run.run_id)
    assert result.returncode == 0 and "watcher started again" in result.stderr, result.stderr
    again = recovery.Chain.load(chain.chain_id)
    assert again.watcher_pid not in (None, chain.watcher_pid) and again.watcher_alive()
    ended = wait_until(
        lambda: (c := recovery.Chain.load(chain.chain_id)).status != recovery.WATCHING and c, timeout=180
    )
    assert ended.status == recovery.SUCCEEDED and "succeeded on attempt 2" in ended.message, ended.message
    assert [a.state for a in ended.attempts] == ["failed", "succeeded"] and ended.attempts[0].run_id == first
