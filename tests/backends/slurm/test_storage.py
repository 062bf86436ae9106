"""Storage that fits a quota, on the real cluster (tests/support/slurm_cluster.py): without
slurm.workdir a run's files go to the scratch space the cluster's login shell names (read through a real sshd),
and ``cloudddp storage`` shows what runs left, largest first, and removes only what no live job uses."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.status import RunState
from tests.support.cli import FIXTURES, cli
from tests.support.rigs import rig_unavailable
from tests.support.slurm_cluster import SlurmCluster
from tests.support.ssh_server import SshUnavailable, ssh_server
from tests.support.wheels import wheel

pytestmark = pytest.mark.slow


def spec_file(tmp_path: Path, name: str, command: str, code: Path | None = None, **slurm: object) -> Path:
    spec = tmp_path / f"{name}.yaml"
    section = {"launch": "srun", "python": sys.executable, "kill_wait": 5, "status_every": 1, **slurm}
    job: dict[str, object] = {"dir": str(code or FIXTURES / "tinyjob"), "command": ["bash", "-c", command]}
    if code is not None:
        job["requirements"] = ["--no-index", "./wheels/rehearsal_dep-1.0-py3-none-any.whl"]
    spec.write_text(json.dumps({"name": name, "code": job, "slurm": section}))
    return spec


def test_without_workdir_a_run_through_ssh_goes_to_the_scratch_its_login_shell_names(
    cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The login node's sessions have SCRATCH (as sites set it for login shells); the spec names no workdir."""
    monkeypatch.delenv("SLURM_CONF", raising=False)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    try:
        server_context = ssh_server(tmp_path / "sshd", {"SLURM_CONF": str(cluster.conf), "SCRATCH": str(scratch)})
        server = server_context.__enter__()
    except SshUnavailable as e:
        rig_unavailable(f"no sshd to stand in for a login node, so the scratch default is not tested here: {e}")
    try:
        spec = spec_file(
            tmp_path, "scratchy", "echo on $SLURMD_NODENAME", login_host=server.host, ssh_options=list(server.options)
        )
        rendered = cli("render", str(spec), "-b", "slurm")
        assert rendered.returncode == 0, rendered.stderr
        assert f"#SBATCH --chdir={scratch}/cloudddp/runs/scratchy-" in rendered.stdout, rendered.stdout
        assert "the working folder from $SCRATCH on the cluster" in rendered.stderr, rendered.stderr
        run = Job.load(spec).submit("slurm", poll_seconds=0.2)
        status = run.wait(timeout=90, poll=0.5)
        assert status.state is RunState.SUCCEEDED, (status, [line.text for line in run.logs()])
        assert Path(status.details["run_dir"]).parent == scratch / "cloudddp" / "runs", status.details
        assert [line.text for line in run.logs() if line.text.startswith("on ")] == ["on node1"]
    finally:
        server_context.__exit__(None, None, None)


def storage(spec: Path, *args: str) -> dict[str, object]:
    done = cli("storage", str(spec), "--json", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


def test_storage_shows_what_runs_left_and_removes_only_what_no_live_job_uses(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    """A finished run with its own environment, and a live run with another: `cloudddp storage` lists both
    runs' folders and environments by size with the live one's marked; --remove keeps what changed lately, and
    with --quiet-minutes 0 removes the finished run's folder and environment, never the live run's."""
    work = tmp_path / "work"
    code = tmp_path / "code"
    (code / "wheels").mkdir(parents=True)
    wheel(code / "wheels")
    done_spec = spec_file(tmp_path, "finished", "true", code, workdir=str(work), setup=["export OTHER_ENV=1"])
    live_spec = spec_file(tmp_path, "live", "touch $CLOUDDDP_RUN_ID.up; sleep 300", code, workdir=str(work))
    finished = Job.load(done_spec).submit("slurm", poll_seconds=0.2)
    assert finished.wait(timeout=120, poll=0.5).state is RunState.SUCCEEDED
    live = Job.load(live_spec).submit("slurm", poll_seconds=0.2)
    live_id = live.run_id
    deadline = time.monotonic() + 120
    while not list(work.glob("runs/live-*/code/live-*.up")) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert live.status().state is RunState.RUNNING, live.status()
    envs = {p.name: p.resolve() for p in (work / "envs").iterdir() if p.is_symlink()}
    live_env = next(name for name in envs if name in (work / "runs" / live_id / "job.sbatch").read_text())
    (done_env,) = set(envs) - {live_env}

    shown = storage(live_spec)
    rows = {row["path"]: row for row in shown["entries"]}  # type: ignore[attr-defined]
    assert shown["workdir"] == str(work) and shown["removed"] == [], shown
    sizes = [row["bytes"] for row in shown["entries"]]  # type: ignore[attr-defined]
    assert sizes == sorted(sizes, reverse=True), sizes
    assert rows[f"runs/{live_id}"]["used_by"] == live_id and rows[f"envs/{live_env}"]["used_by"] == live_id
    assert rows[f"envs/{envs[live_env].name}"]["used_by"] == live_id  # the build the live link points to
    assert rows[f"envs/{done_env}"]["used_by"] is None and rows[f"envs/{envs[done_env].name}"]["used_by"] is None
    assert rows[f"runs/{finished.run_id}"]["used_by"] is None, rows

    assert storage(live_spec, "--remove")["removed"] == []  # everything changed within the last hour
    removed = set(storage(live_spec, "--remove", "--quiet-minutes", "0")["removed"])  # type: ignore[arg-type]
    assert {f"runs/{finished.run_id}", f"envs/{done_env}", f"envs/{envs[done_env].name}"} <= removed, removed
    assert not any(path.startswith("checkpoints/") for path in removed), removed
    assert not (work / "runs" / finished.run_id).exists() and not envs[done_env].exists()
    assert (work / "runs" / live_id / "job.sbatch").exists() and (work / "envs" / live_env).resolve().is_dir()
    assert live.status().state is RunState.RUNNING
    live.cancel()
    assert live.wait(timeout=60, poll=0.5).state is RunState.CANCELLED
