"""Secrets leave the raw files of a local run while it runs, not only when it ends: torchrun's
per-rank files and the agents' consoles are masked in place as they are written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.local import masking
from cloudddp.backends.status import RunState
from tests.support.harnesses import TINY
from tests.support.waiting import wait_until

CANARY = "canary-streamed-4d2b8e"


@pytest.mark.slow
def test_a_secret_printed_by_a_running_job_is_in_no_file_of_its_run_while_it_still_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TINY_TOKEN", CANARY)
    job = Job.load(TINY, ["code.args=[--epochs, 400, --sleep, 0.3, --print-env, TOKEN]"]).override(
        env={"TOKEN": {"from_env": "TINY_TOKEN", "secret": True}}
    )
    forms = [CANARY, json.dumps({"TOKEN": CANARY})]
    run = job.submit("local")
    run_dir = Path(run.status().details["run_dir"])
    printed = lambda: any(line.source == "rank0" and '"TOKEN": "***' in line.text for line in run.logs())  # noqa: E731
    wait_until(printed, timeout=120)  # the script printed it (as JSON), and the log has it redacted

    def leaking() -> list[Path]:
        return [p for p in run_dir.rglob("*") if p.is_file() and any(f.encode() in p.read_bytes() for f in forms)]

    wait_until(lambda: not leaking(), timeout=30)
    assert any((run_dir / "ranks").rglob("stdout.log")) and run.status().state is RunState.RUNNING  # still going
    assert run.cancel()
    assert run.wait(timeout=120, poll=0.5).state is RunState.CANCELLED
    assert not leaking()


def test_rank_files_are_masked_in_place_once_their_lines_settle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rank = tmp_path / "node0" / "run" / "attempt_0" / "0" / "stdout.log"
    rank.parent.mkdir(parents=True)
    rank.write_bytes(b"token=secret-value-1 here\nhalf a line with secret-value-1")
    files = masking.RankFiles(tmp_path, masking.byte_forms(["secret-value-1"]))
    files.sweep()
    assert b"token=secret-value-1" in rank.read_bytes()  # just written: torchrun's tee may not have read it yet
    monkeypatch.setattr(masking, "SETTLE_SECONDS", 0.0)
    files.sweep()
    assert rank.read_bytes() == b"token=************** here\nhalf a line with secret-value-1"  # same length
    files.sweep(final=True)  # the writers are gone: the unfinished line too
    assert rank.read_bytes() == b"token=************** here\nhalf a line with **************"
