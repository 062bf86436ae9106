"""The local backend with real torchrun processes: no mocks of torch or torchrun."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest

from cloudddp.api import Job, Run
from cloudddp.backends.status import RunState
from tests.support.cli import FIXTURES, cli

pytestmark = pytest.mark.slow
TINY = FIXTURES / "tinyjob" / "job.yaml"


def run_pids(run: Run) -> list[int]:
    """Every process whose environment or command line belongs to this run."""
    run_dir = run.status().details["run_dir"]
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (entry / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if run_dir in cmdline or run_dir in environ:
            pids.append(int(entry.name))
    return pids


def test_two_process_job_via_cli_and_metrics_back_through_the_api() -> None:
    result = cli("submit", str(TINY), "--backend", "local", "-o", "code.args=[--epochs, 3]")
    assert result.returncode == 0, result.stderr
    assert "epoch 3" in result.stdout  # metric lines printed while it ran
    run_id = result.stderr.split("submitted ")[1].split()[0]
    run = Run.attach(run_id)
    status = run.status()
    assert status.state is RunState.SUCCEEDED and status.details["exit_codes"] == [0]
    records = list(run.metrics())
    assert [r.epoch for r in records] == [1, 2, 3]
    assert all(r.values["world"] == 2 and r.values["sum_of_ranks"] == 1.0 for r in records)  # 0 + 1
    sources = {line.source for line in run.logs()}
    assert {"rank0", "rank1"} <= sources
    listed = cli("list", "--json")
    assert run_id in listed.stdout


def test_two_nodes_times_one_process_through_real_rendezvous() -> None:
    job = Job.load(TINY, ["local.nodes=2", "local.processes_per_node=1", "code.args=[--epochs, 2]"])
    run = job.submit("local")
    status = run.wait(timeout=120, poll=0.2)
    assert status.state is RunState.SUCCEEDED, status
    lines = [line.text for line in run.logs()]
    assert any("rank 0/2 node 0" in t for t in lines) and any("rank 1/2 node 1" in t for t in lines), lines
    assert [r.values["world"] for r in run.metrics()] == [2.0, 2.0]


def test_cancel_stops_every_process_of_the_run() -> None:
    job = Job.load(TINY, ["code.args=[--epochs, 1000, --sleep, 0.5]"])
    run = job.submit("local")
    for _ in run.metrics(follow=True):
        break  # it is training
    assert run_pids(run), "the run's processes are up"
    started = time.monotonic()
    result = cli("cancel", run.run_id)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 30
    assert run.status().state is RunState.CANCELLED
    deadline = time.monotonic() + 5
    while run_pids(run) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert run_pids(run) == []
    # The script saw SIGTERM and stopped cleanly rather than being killed.
    assert any("stopping at epoch" in line.text for line in run.logs())


def test_a_failed_rank_fails_the_run_with_exit_1_and_says_which_rank() -> None:
    result = cli("submit", str(TINY), "-o", "code.args=[--epochs, 5, --fail-rank, 1]")
    assert result.returncode == 1
    assert "rank 1" in result.stderr and "boom" in result.stderr
    run_id = result.stderr.split("submitted ")[1].split()[0]
    status = cli("status", run_id, "--json")
    assert '"state": "failed"' in status.stdout and '"rank": 1' in status.stdout


def test_detach_returns_at_once_and_status_works_from_another_process() -> None:
    result = cli("submit", str(TINY), "--detach", "--quiet", "-o", "code.args=[--epochs, 2]")
    assert result.returncode == 0
    run_id = result.stdout.strip()
    assert Run.attach(run_id).wait(timeout=120, poll=0.2).state is RunState.SUCCEEDED
    follow = cli("metrics", run_id, "-f", "--json")
    assert follow.returncode == 0 and follow.stdout.count("\n") == 2


def test_secret_values_stay_out_of_the_run_folder_and_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three secrets, one read from the shell, one a multi-line literal (a PEM-like key) and one whose escaped
    forms differ from it (quotes, a backslash, non-ASCII), printed by rank 0 raw, JSON- (ASCII and not) and
    repr-escaped: no line of any, in any of those forms, is in any file of a home made by the run, and that home
    is private (0700)."""
    home = tmp_path / "fresh-home"  # created by cloudddp itself
    monkeypatch.setenv("CLOUDDDP_HOME", str(home))
    monkeypatch.setenv("TINY_TOKEN", "canary-7f3a9c1e5b")
    pem = "-----BEGIN CANARY KEY-----\nQ2FuYXJ5TGluZU9uZQ8x\nQ2FuYXJ5TGluZVR3bw9y\n-----END CANARY KEY-----"
    quoted = "qu\"ot'ed\\pässwörd-4e1c"
    env = {"from_env": "TINY_TOKEN", "secret": True}
    job = Job.load(TINY, ["code.args=[--epochs, 1, --print-env, 'TOKEN,PEM,QUOTED']"]).override(
        env={"TOKEN": env, "PEM": {"value": pem, "secret": True}, "QUOTED": {"value": quoted, "secret": True}}
    )
    escaped = {json.dumps(quoted)[1:-1], json.dumps(quoted, ensure_ascii=False)[1:-1], repr(quoted)[1:-1]}
    assert len(escaped - {quoted}) == 3  # each escaped form differs from the raw value: each is searched for
    forms = {"canary-7f3a9c1e5b", *pem.splitlines(), json.dumps(pem)[1:-1], repr(pem)[1:-1], quoted, *escaped}
    shown = [repr(job.spec), job.spec.model_dump_json(), json.dumps(job.to_dict()), job.render("local").to_json()]
    assert not [f for f in forms for text in shown if f in text]
    run = job.submit("local")
    assert run.wait(timeout=120, poll=0.2).state is RunState.SUCCEEDED
    assert sum("***" in line.text for line in run.logs()) >= 9  # the script did print them
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    files = [path for path in home.rglob("*") if path.is_file()]
    assert any("ranks" in path.parts for path in files)  # torchrun's per-rank files were searched too
    written_by_the_run = [path for path in files if {"ranks", "logs"} & set(path.parts)]
    assert written_by_the_run and all(stat.S_IMODE(path.stat().st_mode) == 0o600 for path in written_by_the_run)
    leaks = [(path, f) for path in files for f in forms if f.encode() in path.read_bytes()]
    assert not leaks, leaks


def test_doctor_names_each_failed_check_and_what_to_do() -> None:
    ok = cli("doctor", str(TINY))
    assert ok.returncode == 0 and "torch installed" in ok.stdout
    bad = cli("doctor", str(TINY), "-o", "inputs.data.path=missing-folder")
    assert bad.returncode == 2
    assert "input data exists" in bad.stdout and "fix:" in bad.stdout
    refused = cli("submit", str(TINY), "-o", "inputs.data.path=missing-folder")
    assert refused.returncode == 2 and "preflight checks failed" in refused.stderr
