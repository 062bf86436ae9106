"""A lost supervisor never leaves a training running unseen, or running twice: real torchrun runs whose
supervisor is killed with SIGKILL are adopted by a new one, a recovery never starts a second copy while the first
trains, and a checkpoint folder is held by one training at a time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cloudddp.api import Run
from cloudddp.backends.folderlock import FolderHeld, FolderLock
from cloudddp.backends.local import LocalBackend
from cloudddp.backends.local.console import Cursor, Output, copy_lines
from cloudddp.backends.local.nodes import Node, recorded_exit
from cloudddp.backends.procs import Process
from cloudddp.backends.status import RunState
from tests.support.cli import ROOT, cli
from tests.support.faults import processes_naming, rank_processes
from tests.support.harnesses import TINY
from tests.support.waiting import wait_until

EPOCHS = 16
TRAIN = ["-o", f"code.args=[--epochs, {EPOCHS}, --sleep, 0.6]"]  # ~10 s: time to see the run adopted while it trains


def submit(*args: str, env: dict[str, str] | None = None) -> tuple[Run, Path]:
    result = cli("submit", str(TINY), *TRAIN, *args, "--detach", "--quiet", env=env)
    assert result.returncode == 0, result.stderr
    run = Run.attach(result.stdout.strip())
    return run, Path(run.backend.status(run.run_id).details["run_dir"])


def kill_supervisor_while_training(run_id: str, run_dir: Path) -> None:
    """SIGKILL the run's supervisor once epoch 2 is in its metrics, as the OOM killer would."""
    wait_until(lambda: any(r.epoch == 2 for r in LocalBackend().metrics(run_id)), timeout=180)
    status = json.loads((run_dir / "status.json").read_text())
    supervisor = Process.from_record(status["supervisor_pid"], status["supervisor"])
    assert supervisor is not None and supervisor.signal(signal.SIGKILL)
    wait_until(lambda: not supervisor.alive(), timeout=30)


def epochs(run_id: str) -> list[int]:
    shown = cli("metrics", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    return [json.loads(line)["epoch"] for line in shown.stdout.splitlines()]


@pytest.mark.slow
def test_a_killed_supervisor_is_adopted_and_the_run_succeeds_with_every_epoch_and_the_full_log() -> None:
    run, run_dir = submit()
    kill_supervisor_while_training(run.run_id, run_dir)
    seen = LocalBackend().status(run.run_id)  # the backend's own look, before anything adopts the run
    assert seen.state is RunState.RUNNING and seen.message == "running (supervisor lost)", seen
    shown = cli("status", run.run_id, "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["state"] == "running", shown.stdout
    taken = wait_until(lambda: "a new one took over" in (m := run.status().message) and m, timeout=60)
    assert taken.startswith("running (its supervisor was lost"), taken

    status = run.wait(timeout=240, poll=0.5)
    assert status.state is RunState.SUCCEEDED, status
    recorded = json.loads((run_dir / "status.json").read_text())
    assert recorded["adopted"] is True and recorded["exit_codes"] == [0]
    assert epochs(run.run_id) == list(range(1, EPOCHS + 1))
    log = cli("logs", run.run_id).stdout.splitlines()
    for epoch in range(1, EPOCHS + 1):  # every line once: nothing lost at the hand-over, nothing copied twice
        assert sum(f'{{"epoch": {epoch}, ' in line for line in log) == 1, (epoch, log)
    assert sum("rank 1/2" in line for line in log) == 1
    folder = json.loads((run_dir / "plan.json").read_text())["request"]["env"]["CLOUDDDP_CHECKPOINT_DIR"]
    assert FolderLock(Path(folder)).holder() is None  # released at the end
    wait_until(lambda: not processes_naming(str(run_dir)), timeout=30)  # nothing of the run is left: no store


@pytest.mark.slow
def test_a_metrics_follower_started_before_the_supervisor_is_lost_adopts_the_run_and_sees_every_epoch() -> None:
    run, run_dir = submit()
    argv = [sys.executable, "-m", "cloudddp", "metrics", run.run_id, "--follow", "--json"]
    follower = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kill_supervisor_while_training(run.run_id, run_dir)
    out, err = follower.communicate(timeout=240)  # nothing else looks at the run: the follower adopts it
    assert follower.returncode == 0, err
    assert [json.loads(line)["epoch"] for line in out.splitlines()] == list(range(1, EPOCHS + 1))
    assert json.loads((run_dir / "status.json").read_text())["adopted"] is True
    assert run.status().state is RunState.SUCCEEDED


@pytest.mark.slow
def test_with_max_recoveries_a_lost_supervisor_never_starts_a_second_attempt_while_the_first_trains() -> None:
    run, run_dir = submit("-o", "limits.max_recoveries=1", env={"CLOUDDDP_RECOVERY_POLL": "0.3"})
    chain = run.chain
    assert chain is not None
    kill_supervisor_while_training(run.run_id, run_dir)
    # Nobody but the recovery watcher looks at the run: it adopts it, and never launches a second attempt.
    while rank_processes(str(run_dir)):
        chain = run.chain
        assert chain is not None and len(chain.attempts) == 1, chain.summary()
        time.sleep(0.2)
    status = run.wait(timeout=240, poll=0.5)
    assert status.state is RunState.SUCCEEDED, status
    assert [a["run_id"] for a in status.details["attempts"]] == [run.run_id]
    assert json.loads((run_dir / "status.json").read_text())["adopted"] is True
    assert epochs(run.run_id) == list(range(1, EPOCHS + 1))


@pytest.mark.slow
def test_a_second_copy_of_a_training_refuses_naming_the_holder_and_cancel_stops_an_adopted_run() -> None:
    long = ["-o", "code.args=[--epochs, 200, --sleep, 0.5]"]  # still training when the cancel comes, however late
    argv = [sys.executable, "-m", "cloudddp", "submit", str(TINY), *long, "--detach", "--quiet"]
    env = {**os.environ, "COLUMNS": "200"}
    both = [subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    both.append(subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = [(p.wait(timeout=120), *p.communicate()) for p in both]
    started = [out.strip() for code, out, _ in results if code == 0]
    refused = [err for code, _, err in results if code == 2]
    assert len(started) == 1 and len(refused) == 1, results
    assert f"is held by run {started[0]}" in refused[0] and "Traceback" not in refused[0], refused[0]

    # Cancel still works once the supervisor is lost: the ranks get SIGTERM and the grace to leave.
    run = Run.attach(started[0])
    run_dir = Path(run.backend.status(run.run_id).details["run_dir"])
    kill_supervisor_while_training(run.run_id, run_dir)
    cancelled = cli("cancel", run.run_id)
    assert cancelled.returncode == 0, cancelled.stderr
    status = run.wait(timeout=120, poll=0.5)
    assert status.state is RunState.CANCELLED, status
    assert any("rank 0 stopping at epoch" in line.text for line in run.logs())  # it left on SIGTERM, in time
    assert rank_processes(str(run_dir)) == {}
    again = cli("submit", str(TINY), "-o", "code.args=[--epochs, 1]", "--detach", "--quiet")
    assert again.returncode == 0, again.stderr  # the folder is free again


@pytest.mark.slow
def test_a_run_whose_nodes_ended_unsupervised_is_decided_from_what_they_recorded_and_completed_when_looked_at() -> None:
    run, run_dir = submit("-o", "code.args=[--epochs, 6, --sleep, 0.5]")
    kill_supervisor_while_training(run.run_id, run_dir)
    wait_until(lambda: not rank_processes(str(run_dir)) and (run_dir / "ranks" / "node0.exit").exists(), timeout=120)
    seen = LocalBackend().status(run.run_id)  # nobody has adopted it: decided from the recorded exit code
    assert seen.state is RunState.SUCCEEDED and "decided from what the nodes recorded" in seen.message, seen
    assert cli("status", run.run_id).returncode == 0  # looked at: a new supervisor completes and records it
    wait_until(lambda: json.loads((run_dir / "status.json").read_text()).get("state") == "succeeded", timeout=120)
    assert epochs(run.run_id) == list(range(1, 7))


def test_copying_goes_on_exactly_where_a_killed_copier_stopped(tmp_path: Path) -> None:
    """A cursor saved after each line: a new copier cuts a line written after the last cursor and reads on."""
    console, log = tmp_path / "console", tmp_path / "log"
    console.write_bytes(b"one\ntwo\nthree\nfour")
    cursor = Cursor(tmp_path / "cursor")
    out = Output(log, cursor.log)
    copied: list[str] = []

    def handle(line: str) -> None:
        if line == "three\n":  # killed between writing this line and saving the cursor
            out.write(line)
            raise KeyboardInterrupt
        out.write(line)
        copied.append(line)
        cursor.log = out.length

    with pytest.raises(KeyboardInterrupt):
        copy_lines(console, cursor, handle, lambda: False)
    out.close()
    cursor.close()
    assert log.read_text() == "one\ntwo\nthree\n"

    cursor = Cursor(tmp_path / "cursor")
    assert (cursor.console, cursor.log) == (8, 8)
    out = Output(log, cursor.log)

    def resume(line: str) -> None:
        out.write(line)
        cursor.log = out.length

    copy_lines(console, cursor, resume, lambda: False)
    out.close()
    assert log.read_text() == "one\ntwo\nthree\nfour\n"  # nothing twice, nothing lost, the last line ended


def test_a_checkpoint_folder_is_held_while_a_holder_lives_and_taken_over_after(tmp_path: Path) -> None:
    lock = FolderLock(tmp_path / "ckpt")
    me = Process.of(os.getpid())
    assert me is not None
    lock.acquire("first-run", [me])
    with pytest.raises(FolderHeld, match="held by run first-run"):
        lock.acquire("second-run", [me])
    assert lock.holder() is not None and lock.holder()["run_id"] == "first-run"  # type: ignore[index]
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = Process.of(gone.pid)
    gone.wait()
    lock.hand_over("first-run", [dead] if dead else [])  # only a process that has exited holds it now
    lock.acquire("second-run", [me])  # a stale lock is taken over
    lock.release("first-run")  # not the holder: nothing changes
    assert lock.holder()["run_id"] == "second-run"  # type: ignore[index]
    lock.release("second-run")
    assert lock.holder() is None


def test_a_nodes_recorded_exit_code_reads_a_signal_as_negative(tmp_path: Path) -> None:
    exit_file = tmp_path / "node0.exit"
    assert recorded_exit(exit_file) is None
    for written, meant in (("0\n", 0), ("1\n", 1), ("137\n", -9), ("143\n", -15)):
        exit_file.write_text(written)
        assert recorded_exit(exit_file) == meant


def test_a_node_whose_shell_recorded_its_exit_has_ended_while_that_shell_is_still_leaving(tmp_path: Path) -> None:
    """The record is the shell's last act: a status read between it and the shell's exit sees the node ended."""
    shell = subprocess.Popen(["sleep", "30"])  # stands in for the group's leader, still alive
    try:
        node = Node(0, Process.of(shell.pid), tmp_path / "node0.exit")
        assert not node.ended()
        node.exit_file.write_text("0\n")
        assert node.ended() and node.exit_code() == 0
    finally:
        shell.kill()
        shell.wait()
    assert Node(1, None, tmp_path / "node1.exit").ended()  # no record and no group: lost, also ended
