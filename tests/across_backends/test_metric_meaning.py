"""One meaning for metrics, log tags and the SDKs' noise, the parts every backend shares: metrics come from global
rank 0's lines (or every rank's, naming it), a line is tagged with the rank that printed it or marked as the
runtime's, the attached view shows a matched line and its record both, and the clouds' SDKs write to a file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from cloudddp.api import Run
from cloudddp.backends.base import Backend, Launched
from cloudddp.backends.plugins import spec_from_dict
from cloudddp.backends.sagemaker.logs import host_line
from cloudddp.backends.status import LogLine, RunState, RunStatus
from cloudddp.cli.cmd_submit import event_text
from cloudddp.cli.options import format_record
from cloudddp.errors import UserError
from cloudddp.injob.shim import SHIPPED_AS
from cloudddp.observe.console import line_tag
from cloudddp.observe.metrics import MetricRecord, Pattern, metrics_from_lines
from tests.support.cli import ROOT

LOSS = Pattern("loss", r"loss ([0-9.]+)")
EPOCH = Pattern("epoch", r"Epoch (\d+) ")


def every_rank(epoch: int, world: int = 4) -> list[LogLine]:
    """What a tutorial script prints each epoch: the same line on every rank, and the runtime's line."""
    return [
        *(LogLine(f"rank{r}", f"Epoch {epoch} | loss 0.{epoch + 1}", primary=r == 0, rank=r) for r in range(world)),
        LogLine("node0/torchrun", f"Epoch {epoch} | loss 9.9 (a launcher quoting it)", primary=False),
    ]


def test_declared_metrics_are_read_from_global_rank_0_only_unless_the_job_reads_every_rank() -> None:
    lines = every_rank(0) + every_rank(1)
    records = list(metrics_from_lines(lines, [LOSS, EPOCH]))
    assert [(r.epoch, r.values, r.rank) for r in records] == [(0, {"loss": 0.1}, None), (1, {"loss": 0.2}, None)]
    everyone = list(metrics_from_lines(lines, [LOSS, EPOCH], "all"))
    assert [(r.epoch, r.rank) for r in everyone] == [(e, r) for e in (0, 1) for r in range(4)]
    assert everyone[3].to_dict()["rank"] == 3 and "rank" not in records[0].to_dict()
    assert format_record(everyone[3]) == "rank 3  epoch 0  loss=0.1"


def test_the_spec_says_whose_lines_metrics_come_from_in_either_form() -> None:
    declared = [{"name": "loss", "regex": "loss ([0-9.]+)"}]
    short = spec_from_dict({"name": "m", "metrics": declared})
    assert short.metrics.ranks == "0" and [m.name for m in short.metrics.declared] == ["loss"]
    every = spec_from_dict({"name": "m", "metrics": {"declared": declared, "ranks": "all"}})
    assert every.metrics.ranks == "all"
    assert spec_from_dict({"name": "m", "metrics": {"declared": declared, "ranks": 0}}).metrics.ranks == "0"
    with pytest.raises(UserError, match=r"metrics\.ranks"):
        spec_from_dict({"name": "m", "metrics": {"declared": declared, "ranks": "some"}})
    with pytest.raises(UserError, match="declared twice"):
        spec_from_dict({"name": "m", "metrics": declared * 2})


class Options(BaseModel):
    pass


class Replay(Backend[Options]):
    """A backend whose run printed ``lines`` (a stub: what every backend's log iterator hands over)."""

    name: ClassVar[str] = "replay"
    description: ClassVar[str] = "replays lines"
    options_model = Options

    def __init__(self, lines: list[LogLine], info: dict[str, Any]) -> None:
        super().__init__()
        self.lines = lines
        self.records.add("r1", self.name, "job", RunState.SUCCEEDED.value, info)

    def _render(self, spec: Any) -> Any:
        raise NotImplementedError

    def _launch(self, plan: Any, *, provision: bool, progress: Any) -> Launched:
        raise NotImplementedError

    def _describe(self, run_id: str) -> RunStatus | None:
        return RunStatus(run_id, self.name, "job", RunState.SUCCEEDED, "Completed", "done")

    def _log_iter(self, run_id: str, *, follow: bool) -> Iterator[LogLine]:
        return iter(self.lines)

    def _cancel(self, run_id: str) -> None:
        raise NotImplementedError


def test_the_attached_view_shows_a_matched_line_and_its_record_and_the_same_records_as_metrics() -> None:
    lines = [
        *every_rank(0),
        LogLine("rank0", "Epoch 0 | Training snapshot saved at snapshot.pt", primary=True, rank=0),
        LogLine("rank0", 'CLOUDDDP_METRIC {"epoch":1,"step":4,"lr":0.1}', primary=True, rank=0),
        *every_rank(1),
    ]
    run = Run("r1", Replay(lines, {"metrics": [LOSS.to_dict(), EPOCH.to_dict()]}))
    shown = list(run.events())
    texts = [e.text if isinstance(e, LogLine) else format_record(e) for e in shown]
    assert texts == [
        "Epoch 0 | loss 0.1",
        "epoch 0  loss=0.1",
        "Epoch 0 | Training snapshot saved at snapshot.pt",  # the epoch pattern matches it, but no value: a line
        "epoch 1  step 4  lr=0.1",  # a metric line is shown as its record
        "Epoch 1 | loss 0.2",
        "epoch 1  loss=0.2",
    ]
    assert [e for e in shown if isinstance(e, MetricRecord)] == list(run.metrics())
    every = [e for e in run.events(all_ranks=True) if isinstance(e, LogLine)]
    assert {line.source for line in every} == {"rank0", "rank1", "rank2", "rank3", "node0/torchrun"}
    assert [line_tag(x) for x in every[:5]] == ["rank0", "rank1", "rank2", "rank3", "node0/torchrun runtime"]
    assert "node0/torchrun runtime" in event_text(every[4])


def test_sagemaker_lines_are_tagged_with_the_rank_the_launcher_prefixed_and_the_toolkits_marked() -> None:
    plain = host_line("algo-2", "[rank3]:Epoch 0 | loss 0.5", 1.0, hosts=2)
    assert (plain.source, plain.rank, plain.text, plain.primary) == ("algo-2/rank3", 3, "Epoch 0 | loss 0.5", False)
    mpi = host_line("algo-1", "[1,0]<stdout>:[rank0]:hello", None, hosts=1)
    assert (mpi.source, mpi.rank, mpi.text, mpi.primary) == ("rank0", 0, "hello", True)
    toolkit = host_line(
        "algo-1", "2026-11-25 11:00:00,000 sagemaker-training-toolkit INFO  Invoking user script", 1.0, hosts=2
    )
    assert (toolkit.source, toolkit.rank, toolkit.primary, toolkit.program) == ("algo-1", None, False, False)


def test_the_in_job_launcher_prefixes_each_line_of_its_program_with_the_global_rank(tmp_path: Path) -> None:
    shim = ROOT / "cloudddp" / "injob" / "shim.py"
    payload = {"argv": ["-c", "import sys; print('out'); print('err', file=sys.stderr)"], "python": True, "tag": True}
    for env, rank in (({"RANK": "3"}, "3"), ({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8"}, "5")):
        base = {k: v for k, v in os.environ.items() if k not in ("RANK", "OMPI_COMM_WORLD_RANK")}
        done = subprocess.run(
            [sys.executable, str(shim), "--cloudddp-00", json.dumps(payload)],
            capture_output=True,
            text=True,
            env={**base, **env},
            timeout=60,
            check=True,
        )
        assert (done.stdout, done.stderr) == (f"[rank{rank}]:out\n", f"[rank{rank}]:err\n"), done  # each where written
    untagged = {**payload, "tag": False}
    done = subprocess.run(
        [sys.executable, str(shim), "--cloudddp-00", json.dumps(untagged)], capture_output=True, text=True, check=True
    )
    assert done.stdout == "out\n" and done.stderr == "err\n"
    assert SHIPPED_AS.endswith(".py")


SDK = """import logging, sys, warnings
from pathlib import Path
if sys.argv[2] == "quiet":
    from cloudddp.observe.sdklog import divert, diverted_to
    divert(Path(sys.argv[1]))
import azure.ai.ml  # adds its own stderr handler to the azure.ai.ml logger
from azure.ai.ml.operations import _job_operations
_job_operations.module_logger.info("Proceeding with no tenant id appended to studio URL")
logging.getLogger("azure.ai.ml._utils._experimental").warning("Class X: This is an experimental class,")
warnings.warn_explicit("an SDK's deprecation", FutureWarning, "/site-packages/sdk/module.py", 1)
warnings.warn_explicit("cloudddp's own", UserWarning, str(Path(__import__("cloudddp").__file__)), 1)
print("cloudddp said", file=sys.stderr)
if sys.argv[2] == "quiet":
    print(diverted_to())
"""


@pytest.mark.timeout(180)
def test_the_sdks_own_messages_go_to_a_file_and_cloudddps_stay_on_the_terminal(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "sdk.log"
    loud = subprocess.run([sys.executable, "-c", SDK, str(log), "loud"], capture_output=True, text=True, timeout=120)
    assert "Proceeding with no tenant id" in loud.stderr and "experimental class" in loud.stderr, loud.stderr
    assert "an SDK's deprecation" in loud.stderr
    quiet = subprocess.run([sys.executable, "-c", SDK, str(log), "quiet"], capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout.strip() == str(log)
    assert "Proceeding" not in quiet.stderr and "experimental" not in quiet.stderr and "deprecation" not in quiet.stderr
    assert "cloudddp said" in quiet.stderr and "cloudddp's own" in quiet.stderr, quiet.stderr
    written = log.read_text()
    assert "Proceeding with no tenant id" in written and "experimental class" in written, written
    assert "an SDK's deprecation" in written and "cloudddp's own" not in written


def test_a_repeated_step_is_dropped_alike_in_metrics_and_the_attached_view_per_rank() -> None:
    def line(rank: int, step: int) -> LogLine:
        return LogLine(f"rank{rank}", f"step {step} | loss 0.{step}", primary=rank == 0, rank=rank)

    step = Pattern("step", r"step (\d+) ")
    lines = [line(0, 4), line(1, 4), line(0, 8), line(1, 8), line(0, 4), line(1, 4)]  # resumed: step 4 again
    every = Run("r1", Replay(lines, {"metrics": [LOSS.to_dict(), step.to_dict()], "metric_ranks": "all"}))
    kept = [(r.rank, r.step) for r in every.metrics()]
    assert kept == [(0, 4), (1, 4), (0, 8), (1, 8)]
    assert [(e.rank, e.step) for e in every.events() if isinstance(e, MetricRecord)] == kept
    zero = Run("r1", Replay(lines, {"metrics": [LOSS.to_dict(), step.to_dict()]}))
    assert [r.step for r in zero.metrics()] == [4, 8] == [e.step for e in zero.events() if isinstance(e, MetricRecord)]
