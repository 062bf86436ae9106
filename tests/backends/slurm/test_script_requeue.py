"""The sbatch script's own decisions, run by bash offline with stand-ins for Slurm's commands: a preempted job
is requeued (or, with slurm.requeue off, ends as preempted), a chain's allocation is requeued at its warning
signal and the last one stops at limits.max_runtime, the rendezvous host where node data is private, and the
module system's init where ``module`` is missing. How Slurm itself behaves: tests/backends/slurm/test_preemption.py."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.slurm import SlurmBackend
from cloudddp.backends.slurm.answers import failure, requeue_reasons
from cloudddp.backends.slurm.preflight import _grace_check, _slurm_minutes
from cloudddp.backends.slurm.script import (
    CANCEL_MARK,
    CHAIN_MARK,
    LIMIT_EXIT,
    LIMIT_MARK,
    PREEMPT_MARK,
    PREEMPTED_EXIT,
    REQUEUE_MARK,
    SAVED_MARK,
    UNSAVED_MARK,
)
from cloudddp.backends.status import Cause
from cloudddp.runs.runner import get_backend
from tests.support.cli import FIXTURES, cli

TINY = FIXTURES / "tinyjob" / "job.yaml"
FAKES = {
    # scontrol: `show job` says whether the job was selected for preemption ($PREEMPTED), `show node` is refused
    # unless $NODE_DATA, `requeue` is recorded.
    "scontrol": """case "$1 $2 $3" in
  "-o show job") echo "JobId=$SLURM_JOB_ID JobName=x JobState=${JOB_STATE:-RUNNING} Reason=None \
PreemptEligibleTime=None PreemptTime=${PREEMPTED:-None} SuspendTime=None Restarts=0";;
  "-o show node") [ -n "$NODE_DATA" ] || { echo "slurm_load_node error: Access/permission denied" >&2; exit 1; }
    echo "NodeName=node1 Arch=x86_64 CoresPerSocket=1 NodeAddr=10.0.0.1 NodeHostName=n1 Version=22.05";;
  "show hostnames "*) echo node1;;
  "requeue "*) echo "$2" >> "$CALLS/requeue"; [ -z "$REQUEUE_FAILS" ];;
  *) echo "unexpected scontrol $*" >&2; exit 9;;
esac""",
    # srun: records its arguments; runs until scancel asks the training to stop, or $TRAIN_SECONDS pass; then
    # checkpoints when $CHECKPOINTS.
    "srun": """printf '%s\\n' "$@" > "$CALLS/srun"
end=$(( SECONDS + ${TRAIN_SECONDS:-0} ))
while [ "$SECONDS" -lt "$end" ] && [ ! -e "$CALLS/scancel" ]; do sleep 0.05; done
[ -n "$CHECKPOINTS" ] && mkdir -p "$CLOUDDDP_CHECKPOINT_DIR" && touch "$CLOUDDDP_CHECKPOINT_DIR/ckpt.pt"
exit "${TRAIN_EXIT:-0}\"""",
    "scancel": 'echo "$*" >> "$CALLS/scancel"',
    "hostname": "echo batch-host.example",
}


def render(*overrides: str) -> str:
    backend = get_backend("slurm", token="t1")
    assert isinstance(backend, SlurmBackend)
    return backend.render(Job.load(TINY, list(overrides)).spec).documents["job.sbatch"]


def start(script: str, folder: Path, **env: str) -> subprocess.Popen[str]:
    """The script under bash with the stand-ins first on PATH, as Slurm would start it (job 7, one node)."""
    bin_dir, calls = folder / "bin", folder / "calls"
    bin_dir.mkdir(exist_ok=True)
    calls.mkdir(exist_ok=True)
    for name, body in FAKES.items():
        (bin_dir / name).write_text("#!/bin/bash\n" + body + "\n")
        (bin_dir / name).chmod(0o755)
    (folder / "job.sbatch").write_text(script)
    environ = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(folder),
        "CALLS": str(calls),
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NODELIST": "node1",
        "SLURM_JOB_NUM_NODES": "1",
        "PET_RDZV_ID": "rendezvous-id",
        **env,
    }
    return subprocess.Popen(
        ["bash", str(folder / "job.sbatch")],
        cwd=folder,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=60)
    return proc.returncode, out


def calls(folder: Path, name: str) -> list[str]:
    path = folder / "calls" / name
    return path.read_text().splitlines() if path.exists() else []


def test_a_preempted_job_is_requeued_by_its_script_whatever_the_trainings_exit_code(tmp_path: Path) -> None:
    script = render("slurm.workdir=/shared/w")
    for code in ("0", "1"):  # srun after a clean checkpoint; torchrun ending on SIGTERM
        folder = tmp_path / code
        folder.mkdir()
        status, out = finish(start(script, folder, PREEMPTED="2026-11-25T11:07:13", TRAIN_EXIT=code))
        assert status == 0 and calls(folder, "requeue") == ["7"], out
        assert f"{PREEMPT_MARK}: Slurm selected this job for preemption" in out and f"{REQUEUE_MARK} 7" in out


def test_a_job_not_preempted_exits_with_the_trainings_code_and_is_not_requeued(tmp_path: Path) -> None:
    status, out = finish(start(render("slurm.workdir=/shared/w"), tmp_path, TRAIN_EXIT="3"))
    assert status == 3 and calls(tmp_path, "requeue") == [] and PREEMPT_MARK not in out, out


def test_with_requeue_off_or_refused_a_preempted_job_ends_as_preempted_not_as_its_own_failure(tmp_path: Path) -> None:
    off, refused = tmp_path / "off", tmp_path / "refused"
    off.mkdir()
    refused.mkdir()
    status, out = finish(start(render("slurm.requeue=false"), off, PREEMPTED="2026-11-25T11:07:13"))
    assert status == PREEMPTED_EXIT and calls(off, "requeue") == [] and "slurm.requeue is off" in out, out
    status, out = finish(start(render(), refused, PREEMPTED="2026-11-25T11:07:13", REQUEUE_FAILS="1"))
    assert status == PREEMPTED_EXIT and "scontrol requeue failed" in out, out
    said = failure({"JobState": "FAILED", "ExitCode": f"{PREEMPTED_EXIT}:0"}, "cloudddp: run 0\n" + out)
    assert said.cause is Cause.PREEMPTED and said.message.startswith("the cluster preempted it"), said


def test_a_job_cancelled_during_its_preemption_grace_or_a_chains_stop_is_never_requeued(tmp_path: Path) -> None:
    """scancel while the training checkpoints after a preemption (or a chain's warning): Slurm's record says
    CANCELLED, and `scontrol requeue` would accept the job all the same: the script must not ask."""
    preempted, signalled, chained = tmp_path / "preempted", tmp_path / "signalled", tmp_path / "chained"
    for folder in (preempted, signalled, chained):
        folder.mkdir()
    _, out = finish(start(render(), preempted, PREEMPTED="2026-11-25T11:07:13", JOB_STATE="COMPLETING"))
    assert calls(preempted, "requeue") == [] and CANCEL_MARK in out and REQUEUE_MARK not in out, out
    proc = start(render(), signalled, PREEMPTED="2026-11-25T11:07:13", TRAIN_SECONDS="2")
    wait_for_srun(signalled)
    os.kill(proc.pid, signal.SIGTERM)  # scancel signals the batch script too; its record may still say RUNNING
    _, out = finish(proc)
    assert calls(signalled, "requeue") == [] and CANCEL_MARK in out, out
    script = render(f"slurm.workdir={tmp_path / 'w'}", "slurm.partition_time_limit=2m", "limits.max_runtime=1h")
    proc = start(script, chained, TRAIN_SECONDS="60", JOB_STATE="COMPLETING")
    wait_for_srun(chained)
    os.kill(proc.pid, signal.SIGUSR1)  # the allocation's warning: the training stops, then the user cancels
    _, out = finish(proc)
    assert calls(chained, "requeue") == [] and CANCEL_MARK in out and CHAIN_MARK in out, out


def test_stopped_ahead_of_the_time_limit_status_says_from_its_checkpoint_only_when_one_was_written(
    tmp_path: Path,
) -> None:
    script = render(f"slurm.workdir={tmp_path / 'w'}", "limits.max_runtime=1h")
    (tmp_path / "w" / "runs" / "tiny-t1").mkdir(parents=True)
    said = {}
    for checkpoints in ("", "1"):
        folder = tmp_path / f"checkpoints{checkpoints}"
        folder.mkdir()
        proc = start(script, folder, TRAIN_SECONDS="60", CHECKPOINTS=checkpoints)
        wait_for_srun(folder)
        os.kill(proc.pid, signal.SIGUSR1)  # Slurm's --signal=B:USR1@lead
        status, out = finish(proc)
        assert status == LIMIT_EXIT and (SAVED_MARK if checkpoints else UNSAVED_MARK) in out, out
        said[checkpoints] = failure({"JobState": "FAILED", "ExitCode": f"{LIMIT_EXIT}:0"}, out).message
    assert said["1"].endswith("it wrote its checkpoint: submit again to continue from it"), said
    assert "it wrote nothing to its checkpoint folder in this run" in said[""] and "from its" not in said[""], said


def wait_for_srun(folder: Path) -> None:
    deadline = time.monotonic() + 30
    while not calls(folder, "srun"):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_the_rendezvous_host_is_the_nodes_address_or_where_node_data_is_private_the_batch_hosts(
    tmp_path: Path,
) -> None:
    script = render()
    private, public = tmp_path / "private", tmp_path / "public"
    private.mkdir()
    public.mkdir()
    assert finish(start(script, private))[0] == 0
    assert finish(start(script, public, NODE_DATA="1"))[0] == 0
    private_args, public_args = calls(private, "srun"), calls(public, "srun")
    assert "batch-host.example" in private_args and "10.0.0.1" in public_args, (private_args, public_args)
    assert "node1=10.0.0.1" in public_args


def test_a_chains_allocation_is_requeued_at_its_warning_signal_and_the_last_stops_at_the_budget(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "w" / "runs" / "tiny-t1"
    run_dir.mkdir(parents=True)
    script = render(f"slurm.workdir={tmp_path / 'w'}", "slurm.partition_time_limit=2m", "limits.max_runtime=1h")
    assert "#SBATCH --time=0-00:02:00" in script and "budget=3600 link=120 lead=60" in script
    proc = start(script, tmp_path, TRAIN_SECONDS="60")
    wait_for_srun(tmp_path)
    os.kill(proc.pid, signal.SIGUSR1)  # Slurm's --signal=B:USR1@lead
    status, out = finish(proc)
    assert status == 0 and calls(tmp_path, "scancel") == ["--signal=TERM 7"], out
    assert calls(tmp_path, "requeue") == ["7"] and CHAIN_MARK in out, out
    assert f"{REQUEUE_MARK} 7 after the time limit of this allocation" in out
    assert 0 <= int((run_dir / ".cloudddp-used-seconds").read_text()) < 30

    (run_dir / ".cloudddp-used-seconds").write_text("3539")  # the budget ends 1 s after the warning's lead
    last = tmp_path / "last"
    last.mkdir()
    status, out = finish(start(script, last, TRAIN_SECONDS="60"))
    assert status == LIMIT_EXIT and calls(last, "requeue") == [] and "3539 s of limits.max_runtime" in out, out
    assert calls(last, "scancel") == ["--signal=TERM 7"] and LIMIT_MARK in out

    (run_dir / ".cloudddp-used-seconds").write_text("3590")  # nothing left worth starting for
    spent = tmp_path / "spent"
    spent.mkdir()
    status, out = finish(start(script, spent))
    assert status == LIMIT_EXIT and not calls(spent, "srun") and "spent by earlier allocations" in out, out
    said = failure({"JobState": "FAILED", "ExitCode": f"{LIMIT_EXIT}:0"}, out)
    assert said.cause is Cause.LIMIT, said
    assert requeue_reasons(f"cloudddp: run 0\n{CHAIN_MARK} is 60 s away\ncloudddp: run 1\n") == [
        "the partition's time limit (a chain of allocations)"
    ]


def test_a_chain_needs_requeue_and_the_partitions_limit_is_read_as_slurm_writes_it() -> None:
    refused = cli(
        "render", str(TINY), "-b", "slurm", "-o", "slurm.partition_time_limit=1h", "-o", "slurm.requeue=false"
    )
    assert refused.returncode == 2 and "slurm.requeue is off" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    assert [_slurm_minutes(v) for v in ("UNLIMITED", "00:01:00", "1-00:00:00", "30", "2:00:30")] == [
        None,
        1,
        1440,
        30,
        121,
    ]


def test_module_load_finds_the_module_systems_init_where_module_is_missing(tmp_path: Path) -> None:
    init = tmp_path / "modules" / "init"
    init.mkdir(parents=True)
    (init / "bash").write_text('module() { echo "module $*" >> "$CALLS/module"; }\n')
    script = render("slurm.modules=[cuda/12.4, nccl]")
    status, out = finish(start(script, tmp_path, MODULESHOME=str(tmp_path / "modules")))
    assert status == 0 and calls(tmp_path, "module") == ["module load cuda/12.4", "module load nccl"], out
    standard = ("/etc/profile.d/lmod.sh", "/etc/profile.d/modules.sh", "/usr/share/lmod/lmod/init/bash")
    if any(Path(p).exists() for p in [*standard, "/usr/share/modules/init/bash"]):
        pytest.skip("this machine has a module system, so a node without one cannot be shown here")
    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()
    status, out = finish(start(script, nowhere))
    assert status == 2 and "slurm.modules is set, but this node has no module command" in out, out
    assert not calls(nowhere, "srun")


def test_the_script_is_told_the_smaller_grace_and_torchrun_waits_as_long_as_any_stop_lasts() -> None:
    """KillWait 30 s and GraceTime 10 s: CLOUDDDP_SIGTERM_GRACE is 10 and the plan says why; torchrun's agent
    waits the longest stop (the time limit's lead, 180 s), so it never SIGKILLs a rank Slurm would still let
    save. Without slurm.grace_time the script is told KillWait."""
    backend = get_backend("slurm", token="t1")
    plan = backend.render(Job.load(TINY, ["slurm.kill_wait=30", "slurm.grace_time=10"]).spec)
    env = plan.request.env
    assert (env["CLOUDDDP_SIGTERM_GRACE"], env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"]) == ("10", "180"), env
    said = next(d for d in plan.decisions if d.startswith("SIGTERM grace"))
    assert "GraceTime (slurm.grace_time 10 s): the script is told the smaller, 10 s" in said, said
    plain = backend.render(Job.load(TINY, ["slurm.kill_wait=30"]).spec).request.env
    assert plain["CLOUDDDP_SIGTERM_GRACE"] == "30", plain


class _Config:
    """Slurm's `scontrol show config`, as the cluster would answer (the preflight's only question here)."""

    def text(self, argv: list[str]) -> str:
        assert argv == ["scontrol", "show", "config"], argv
        return "KillWait                = 30 sec\n"


def test_doctor_fails_when_the_script_would_be_told_more_than_the_partitions_grace_time() -> None:
    backend = get_backend("slurm", token="t1")
    spot = {"PartitionName": "spot", "PreemptMode": "REQUEUE", "GraceTime": "10"}
    told_30 = backend.render(Job.load(TINY, ["slurm.kill_wait=30"]).spec)
    check = _grace_check(_Config(), told_30, spot)  # type: ignore[arg-type]
    assert not check.ok and "GraceTime 10 s; the script is told 30 s" in check.detail, check
    assert check.fix == "set slurm.kill_wait: 30 and slurm.grace_time: 10 (partition spot)", check
    told_10 = backend.render(Job.load(TINY, ["slurm.kill_wait=30", "slurm.grace_time=10"]).spec)
    assert _grace_check(_Config(), told_10, spot).ok  # type: ignore[arg-type]
    assert _grace_check(_Config(), told_30, {**spot, "PreemptMode": "OFF"}).ok  # type: ignore[arg-type]
