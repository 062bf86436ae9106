"""What Debian's Slurm 22.05 does on a real two-node cluster (tests/support/slurm_cluster.py), proved once:
the facts a Slurm backend relies on (tests/support/SLURM.md writes them down)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.support import slurm_cluster as rig
from tests.support.slurm_cluster import SlurmCluster, cluster_fixture, parse_pairs

pytestmark = pytest.mark.slow


def script(folder: Path, body: str) -> str:
    path = folder / "job.sh"
    path.write_text("#!/bin/bash\n" + body)
    return path.name


def wait_for_files(paths: list[Path], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        if time.monotonic() > deadline:
            raise TimeoutError(f"missing after {timeout} s: {[str(p) for p in paths if not p.exists()]}")
        time.sleep(0.1)


def test_two_idle_nodes_on_their_own_munge(slurm_cluster: SlurmCluster) -> None:
    listing = slurm_cluster.run("sinfo", "-h", "-N", "-p", "debug", "-o", "%N %T").stdout.split()
    assert listing == ["node1", "idle", "node2", "idle"]
    for name in ("node1", "node2"):
        node = slurm_cluster.node(name)
        assert node["NodeAddr"] == "127.0.0.1" and node["Port"] == str(slurm_cluster.node_ports[name])
    assert slurm_cluster.node_ports["node1"] != slurm_cluster.node_ports["node2"]
    socket = str(slurm_cluster.munge_socket)
    credential = subprocess.run(
        ["munge", "-S", socket, "-n"], capture_output=True, text=True, timeout=10, check=True
    ).stdout
    decoded = subprocess.run(
        ["unmunge", "-S", socket], input=credential, capture_output=True, text=True, timeout=10, check=False
    )
    assert "STATUS:          Success (0)" in decoded.stdout


def test_srun_in_a_batch_job_runs_one_task_per_node_and_the_state_stays_readable(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    name = script(tmp_path, "srun --ntasks-per-node=1 bash -c 'env > \"env.$SLURM_PROCID\"'\n")
    job_id = slurm_cluster.sbatch("-N2", "-o", "out.txt", name, cwd=tmp_path)
    info = slurm_cluster.wait_job(job_id)
    assert (info["JobState"], info["ExitCode"], info["NodeList"], info["BatchHost"]) == (
        "COMPLETED",
        "0:0",
        "node[1-2]",
        "node1",
    ), (tmp_path / "out.txt").read_text()
    tasks = [
        dict(line.split("=", 1) for line in (tmp_path / f"env.{rank}").read_text().splitlines() if "=" in line)
        for rank in (0, 1)
    ]
    assert [(t["SLURM_PROCID"], t["SLURMD_NODENAME"], t["SLURM_NODEID"], t["SLURM_LOCALID"]) for t in tasks] == [
        ("0", "node1", "0", "0"),
        ("1", "node2", "1", "0"),
    ]
    for task in tasks:
        assert task["SLURM_JOB_ID"] == job_id and task["SLURM_NTASKS"] == "2" and task["SLURM_JOB_NUM_NODES"] == "2"
        assert task["SLURM_JOB_NODELIST"] == task["SLURM_STEP_NODELIST"] == "node[1-2]"
        assert task["SLURM_LAUNCH_NODE_IPADDR"] == "127.0.0.1"
        assert task["SLURM_CONF"] == str(slurm_cluster.conf)
        assert "SLURM_RESTART_COUNT" not in task
    record = slurm_cluster.completion(job_id)
    assert record is not None and (record["JobState"], record["ExitCode"]) == ("COMPLETED", "0:0")


def test_a_failed_task_gives_exit_code_state_and_its_node_without_slurmdbd(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    name = script(tmp_path, "srun --ntasks-per-node=1 bash -c '[ \"$SLURM_PROCID\" = 1 ] && exit 5; exit 0'\n")
    job_id = slurm_cluster.sbatch("-N2", "-o", "out.txt", name, cwd=tmp_path)
    info = slurm_cluster.wait_job(job_id)
    assert (info["JobState"], info["Reason"], info["ExitCode"]) == ("FAILED", "NonZeroExitCode", "5:0")
    assert "srun: error: node2: task 1: Exited with exit code 5" in (tmp_path / "out.txt").read_text()
    record = slurm_cluster.completion(job_id)
    assert record is not None and (record["JobState"], record["ExitCode"], record["NodeList"]) == (
        "FAILED",
        "5:0",
        "node[1-2]",
    )
    table = slurm_cluster.run("sacct", "--completion", "-j", job_id, "-n", "-P", "-o", "JobID,State,ExitCode").stdout
    assert table.split() == [f"{job_id}|FAILED|5:0"]
    plain = slurm_cluster.run("sacct", "-j", job_id, check=False)
    assert "accounting storage is disabled" in plain.stdout + plain.stderr


def test_requeue_sends_sigterm_to_every_task_and_runs_the_script_again(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    name = script(
        tmp_path,
        """echo "run ${SLURM_RESTART_COUNT:-0}"
[ "${SLURM_RESTART_COUNT:-0}" -ge 1 ] && exit 0
srun --ntasks-per-node=1 bash -c 'trap "echo TERM task $SLURM_PROCID on $SLURMD_NODENAME; exit 0" TERM
  touch "started.$SLURM_PROCID"; while :; do sleep 0.1; done'
""",
    )
    job_id = slurm_cluster.sbatch("-N2", "-o", "out.txt", "--open-mode=append", name, cwd=tmp_path)
    wait_for_files([tmp_path / "started.0", tmp_path / "started.1"])
    slurm_cluster.run("scontrol", "requeue", job_id)
    pending = slurm_cluster.wait_job(job_id, {"PENDING"}, timeout=20)
    assert (pending["Reason"], pending["Restarts"]) == ("BeginTime", "1")  # eligible again cred_expire + 1 s later
    info = slurm_cluster.wait_job(job_id, timeout=30)
    assert (info["JobState"], info["Restarts"], info["ExitCode"]) == ("COMPLETED", "1", "0:0")
    out = (tmp_path / "out.txt").read_text()
    assert "TERM task 0 on node1" in out and "TERM task 1 on node2" in out, out
    assert out.index("run 0") < out.index("run 1")
    assert "DUE TO JOB REQUEUE" in out
    assert [run["JobState"] for run in slurm_cluster.completions(job_id)] == ["PENDING", "COMPLETED"]


def test_a_dead_node_fails_its_jobs_with_node_fail_and_a_requeueable_job_runs_again_when_it_returns(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """Two 2-node jobs at once (each node has 2 CPUs): one --no-requeue, one requeueable (the default).

    The batch script outlives its failed step (``|| sleep``): srun may notice the lost node before slurmctld
    declares it dead (on a loaded machine it did), and a batch script that exits first ends its job FAILED,
    not NODE_FAIL, so Slurm would not requeue it (a fresh-clone run once failed that way).
    """
    body = """[ "${SLURM_RESTART_COUNT:-0}" -ge 1 ] && { echo "run again"; exit 0; }
srun --ntasks-per-node=1 bash -c 'touch "started.$SLURM_JOB_ID.$SLURM_PROCID"; while :; do sleep 0.1; done' || sleep 300
"""
    name = script(tmp_path, body)
    fixed = slurm_cluster.sbatch("-N2", "--no-requeue", "-o", "fixed.txt", name, cwd=tmp_path)
    again = slurm_cluster.sbatch("-N2", "-o", "again.txt", "--open-mode=append", name, cwd=tmp_path)
    wait_for_files([tmp_path / f"started.{job}.{rank}" for job in (fixed, again) for rank in (0, 1)])
    killed_at = time.monotonic()
    slurm_cluster.kill_node("node2")
    try:
        info = slurm_cluster.wait_job(fixed, {"NODE_FAIL"}, timeout=45)
        noticed = time.monotonic() - killed_at
        node = slurm_cluster.node("node2")
        assert info["Reason"] == "NodeDown" and node["State"].startswith("DOWN"), (info, node)
        assert node["Reason"].startswith("Not responding")
        assert "Node failure on node2" in (tmp_path / "fixed.txt").read_text()
        requeued = slurm_cluster.wait_job(again, {"PENDING"}, timeout=10)
        assert requeued["Restarts"] == "1"
        record = slurm_cluster.completion(again)
        assert record is not None and record["JobState"] == "NODE_FAIL"
    finally:
        slurm_cluster.start_node("node2")
    slurm_cluster.wait_nodes("idle", ("node2",), timeout=20)
    done = slurm_cluster.wait_job(again, timeout=30)
    assert (done["JobState"], done["Restarts"]) == ("COMPLETED", "1")
    assert "run again" in (tmp_path / "again.txt").read_text()
    print(f"node2 killed: its jobs were NODE_FAIL after {noticed:.1f} s")  # SlurmdTimeout 5 s, MessageTimeout 3 s


def test_the_cluster_is_configured_as_real_ones_are(slurm_cluster: SlurmCluster) -> None:
    """Partitions for preemption with a grace time and a short time limit; node data private to users; each task
    bound to its own CPUs; jobs of an unprivileged user (tests/support/SLURM.md, "As real clusters are")."""
    parts = {
        p["PartitionName"]: p
        for p in map(parse_pairs, slurm_cluster.run("scontrol", "-o", "show", "partition").stdout.splitlines())
    }
    assert (parts[rig.SPOT]["PreemptMode"], parts[rig.SPOT]["GraceTime"]) == ("REQUEUE", str(rig.GRACE_TIME))
    assert int(parts[rig.URGENT]["PriorityTier"]) > int(parts[rig.SPOT]["PriorityTier"])
    assert parts[rig.SHORT]["MaxTime"] == f"00:{rig.SHORT_MINUTES:02d}:00" and parts["debug"]["PreemptMode"] == "OFF"
    user = slurm_cluster.user()
    refused = user.run(["scontrol", "-o", "show", "node", "node1"])
    assert refused.returncode != 0 and "Access/permission denied" in refused.stderr, refused
    folder = user.home / "affinity"
    user.run(["mkdir", "-p", str(folder)])
    show = 'echo "$SLURM_PROCID $(id -un) $(grep Cpus_allowed_list /proc/self/status)"'
    body = f"srun bash -c '{show} plain' > plain.txt\nsrun --cpus-per-task=2 bash -c '{show} given' > given.txt\n"
    (folder / "job.sh").write_text("#!/bin/bash\n" + body)
    argv = ["sbatch", "--parsable", "-N2", "--ntasks-per-node=1", "--cpus-per-task=2", "-o", "out.txt", "job.sh"]
    job = user.run(argv, cwd=folder)
    assert job.returncode == 0, job.stderr
    info = slurm_cluster.wait_job(job.stdout.strip().split(";")[0])
    assert (info["JobState"], info["UserId"].split("(")[0]) == ("COMPLETED", user.name), info
    given = sorted((folder / "given.txt").read_text().splitlines())
    assert [line.split()[:2] for line in given] == [["0", user.name], ["1", user.name]], given
    assert all(line.split()[-2:] == ["0-1", "given"] for line in given), given  # its 2 CPUs, and only those
    # Slurm 22.05's srun does not read the allocation's --cpus-per-task: unless given, a task gets one CPU.
    plain = sorted((folder / "plain.txt").read_text().splitlines())
    assert all(line.split()[-2:] == ["0", "plain"] for line in plain), plain


def test_scontrol_output_parses_values_with_spaces() -> None:
    line = "JobId=7 JobName=my job Reason=None Comment=a=b c NodeList=node[1-2]"
    assert parse_pairs(line) == {
        "JobId": "7",
        "JobName": "my job",
        "Reason": "None",
        "Comment": "a=b c",
        "NodeList": "node[1-2]",
    }


def test_without_the_packages_the_fixture_skips_and_says_why_and_on_ci_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(rig, "which", lambda tool: None if tool in ("slurmd", "munged") else f"/usr/bin/{tool}")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"munged, slurmd missing.*make system-deps"):
        next(cluster_fixture(tmp_path))
    assert not (tmp_path / "slurm.conf").exists()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"munged, slurmd missing.*make system-deps.*CI=true"):
        next(cluster_fixture(tmp_path))
