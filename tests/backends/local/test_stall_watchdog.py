"""The stall watchdog: an own script that never passes the collective timeout to
``init_process_group`` and hangs after its first epoch fails as stalled within ``limits.stall_timeout``, with the
stuck rank's Python stack in its log (a real torchrun run, faulthandler on the signal the hook registers)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.plugins import spec_from_dict
from cloudddp.backends.status import Cause, RunState
from cloudddp.injob import stall
from tests.support.cli import FIXTURES, cli

STALL_S = 10
HANGS = """
import json, time
import torch, torch.distributed as dist

dist.init_process_group("gloo")  # no timeout given: gloo's default is 30 minutes
rank = dist.get_rank()


def hang_forever():
    while True:
        time.sleep(1)


t = torch.ones(1)
dist.all_reduce(t)
if rank == 0:
    print("CLOUDDDP_METRIC " + json.dumps({"epoch": 1, "loss": 0.5, "time": time.time()}), flush=True)
print(f"rank {rank} finished epoch 1", flush=True)
if rank == 1:
    hang_forever()
dist.all_reduce(t)  # rank 0 waits here for rank 1, which never comes
"""


@pytest.mark.slow
def test_a_script_that_hangs_after_its_first_epoch_fails_as_stalled_with_the_stuck_ranks_stack(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(HANGS)
    job = Job.from_dict(
        {
            "name": "hangs",
            "code": {"dir": str(tmp_path), "entry": "train.py"},
            "local": {"processes_per_node": 2},
            "checkpoint": {"enabled": False},
            "limits": {"stall_timeout": f"{STALL_S}s", "max_runtime": "10m"},
        }
    )
    run = job.submit("local")
    status = run.wait(timeout=180, poll=0.5)
    assert status.state is RunState.FAILED and status.cause is Cause.HANG, status
    assert status.message.startswith(f"stalled: no rank printed anything for {STALL_S} s"), status.message
    # the culprit named with the line it is on, the other rank shown waiting for it
    assert "hang: rank 1: train.py:11 in hang_forever: time.sleep(1)" in status.message, status.message
    assert "rank 0: waiting in all_reduce" in status.message, status.message

    lines = list(run.logs())
    last_output = max(r.time or 0 for r in run.metrics())  # epoch 1's record; the ranks print nothing after it
    assert status.ended_at is not None
    took = status.ended_at - last_output
    assert STALL_S <= took < STALL_S + 30, f"failed {took:.1f} s after the last output"
    stuck = [line.text for line in lines if line.source == "rank1"]
    assert any("in hang_forever" in text for text in stuck), stuck  # the stuck rank's Python stack
    waiting = [line.text for line in lines if line.source == "rank0"]
    assert any("all_reduce" in text for text in waiting), waiting  # and where the other one waits for it
    # What status and the attached view show (they follow rank 0's lines): rank 1's stack first
    tail = status.details["failure"]["log_tail"]
    assert status.details["failure"]["stalled_ranks"] == [1, 0], status.details
    assert status.details["failure"]["culprits"] == [1], status.details
    assert tail[0] == "rank 1, most recent call first:", tail
    waiting = tail.index("rank 0 (waiting in all_reduce), most recent call first:")
    assert any("in hang_forever" in line for line in tail[:waiting]), tail
    shown = cli("status", run.run_id)
    assert "rank 1, most recent call first" in shown.stdout and "hang_forever" in shown.stdout, shown.stdout


def test_the_stall_timeout_defaults_to_twice_the_collective_timeout_and_the_plan_says_how_stacks_are_taken(
    tmp_path: Path,
) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")

    def spec(**limits: object) -> Job:
        data = {"name": "s", "distribution": {"collective_timeout": "20s"}, "limits": limits}
        return Job(spec_from_dict(data, base_dir=tmp_path))

    assert spec().spec.stall_seconds == 40
    assert spec(stall_timeout="2m").spec.stall_seconds == 120
    assert spec(stall_timeout="off").spec.stall_seconds is None
    off = Job.load(
        FIXTURES / "tinyjob" / "job.yaml", ["limits.stall_timeout=off"]
    )  # unquoted, YAML reads `off` as false: off all the same
    assert off.spec.stall_seconds is None
    plan = spec().render("local")
    assert plan.request.stall_timeout == 40
    (note,) = [d for d in plan.decisions if d.startswith("stall watchdog")]
    assert "40 s (twice distribution.collective_timeout)" in note and "in `cloudddp status`" in note
    assert "SIGRTMIN" not in note and "sitecustomize" not in note  # no jargon in what every submit prints
    assert any("watchdog off" in d for d in spec(stall_timeout="off").render("local").decisions)
    slurm = spec(stall_timeout="2m").render("slurm")  # renders offline; its supervisor is Slurm's
    assert any("limits.stall_timeout is not enforced on slurm" in w for w in slurm.warnings), slurm.warnings
    assert not any("stall_timeout" in w for w in spec().render("slurm").warnings)  # the default warns nobody


def test_the_watchdog_names_every_quiet_source_the_longest_first() -> None:
    now = [100.0]
    dog = stall.Watchdog(10, clock=lambda: now[0])
    now[0] = 200.0
    assert dog.quiet() is None  # nothing printed yet: starting may take up to STARTUP_SECONDS
    now[0] = 100.0 + stall.STARTUP_SECONDS
    assert dog.quiet() == []  # a run that never printed a line is stalled after that
    now[0] = 100.0
    dog.heard("a")
    now[0] = 104.0
    dog.heard("b")
    now[0] = 113.0
    assert dog.quiet() is None  # b printed 9 s ago
    now[0] = 114.5
    assert dog.quiet() == [("a", 14.5), ("b", 10.5)]


def test_the_hook_makes_a_python_process_print_its_stack_on_the_signal_and_go_on(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    hook = stall.install_hook(tmp_path / "hooks")
    (tmp_path / "sitecustomize.py").write_text("import builtins; builtins.HIDDEN_RAN = True\n")  # the one it hides
    script = "import builtins, time\nprint(getattr(builtins, 'HIDDEN_RAN', False), flush=True)\ntime.sleep(30)\n"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(hook), str(tmp_path)]),
        stall.SIGNAL_VARIABLE: str(stall.STACK_SIGNAL),
    }
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"True"  # the hidden one ran too
        deadline = time.monotonic() + 30
        while not stall.catches(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stall.catches(proc.pid)
        os.kill(proc.pid, stall.STACK_SIGNAL)
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert b"most recent call first" in first, first
        time.sleep(0.2)
        assert proc.poll() is None  # it goes on
    finally:
        proc.kill()
        proc.wait()


def test_a_job_asking_for_gpus_on_a_machine_that_trains_on_the_cpu_is_warned(tmp_path: Path) -> None:
    """`-o resources.gpus_per_node=2` on a machine that trains on the CPU renders with a warning naming the GPUs."""
    (tmp_path / "train.py").write_text("print('hi')\n")
    data = {"name": "g", "code": {"dir": str(tmp_path), "entry": "train.py"}, "local": {"device": "cpu"}}
    gpus = Job(spec_from_dict({**data, "resources": {"gpus_per_node": 2}}, base_dir=tmp_path)).render("local")
    assert any("resources.gpus_per_node is 2 but the run trains on the CPU here" in w for w in gpus.warnings)
    cpu = Job(spec_from_dict(data, base_dir=tmp_path)).render("local")
    assert not any("trains on the CPU" in w for w in cpu.warnings), cpu.warnings
