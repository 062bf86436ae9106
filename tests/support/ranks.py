"""A 2-node × 2-process job whose every rank prints the same measurement, and the checks that metrics and log tags
mean the same on every backend: one record per measurement of global rank 0, the attached view's records equal to
``metrics --json``, and every program line tagged with the global rank that printed it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cloudddp.cli.options import format_record
from cloudddp.observe.metrics import MetricRecord, record_from_dict

WORLD = 4
EPOCHS = 3
SCRIPT = """import os
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
for epoch in range(3):
    # every rank prints it, each its own value: only global rank 0's may become a record
    print(f"Epoch {epoch} | loss {0.1 * (epoch + 1) + rank:.4f} | printed by {rank}", flush=True)
    if rank == 0:
        print(f"Epoch {epoch} | snapshot saved | printed by {rank}", flush=True)
dist.barrier()
dist.destroy_process_group()
"""
METRICS = [{"name": "loss", "regex": r"\| loss ([0-9.]+) \|"}, {"name": "epoch", "regex": r"Epoch (\d+) \|"}]


def code_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "every-rank"
    folder.mkdir()
    (folder / "train.py").write_text(SCRIPT)
    return folder


def job(tmp_path: Path, **sections: Any) -> dict[str, Any]:
    """The job as data: 2 nodes × 2 processes on CPUs, the declared metrics; ``sections`` added (a backend's)."""
    return {
        "name": "every-rank",
        "code": {"dir": str(code_folder(tmp_path)), "entry": "train.py"},
        "resources": {"nodes": 2, "gpus_per_node": 0, "processes_per_node": 2},
        "metrics": METRICS,
        **sections,
    }


def write_job(tmp_path: Path, **sections: Any) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(json.dumps(job(tmp_path, **sections)))
    return path


def expected() -> list[str]:
    """Global rank 0's measurements, as records are shown: one per epoch, rank 0's value."""
    return [f"epoch {epoch}  loss={0.1 * (epoch + 1):.4g}" for epoch in range(EPOCHS)]


def shown(records: Iterable[MetricRecord]) -> list[str]:
    return [format_record(r) for r in records]


def json_records(stdout: str) -> list[str]:
    """``metrics --json`` output, as records are shown."""
    found = []
    for line in stdout.splitlines():
        record = record_from_dict(json.loads(line))
        assert record is not None, line
        found.append(format_record(record))
    return found


def attached_view(stdout: str) -> tuple[list[str], list[str]]:
    """An attached submit's stdout (not a terminal): its ``[tag] text`` lines, and the records between them."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    return [line for line in lines if line.startswith("[")], [line for line in lines if not line.startswith("[")]


def check_attached(stdout: str, metrics_json: str, tag: str = "rank0") -> None:
    """The attached view shows each of rank 0's lines once, as printed: one that a declared pattern matched is not
    shown again as its record; ``metrics --json`` has the records, one per measurement, rank 0's."""
    assert json_records(metrics_json) == expected(), metrics_json
    lines, records = attached_view(stdout)
    assert records == [], stdout
    for epoch in range(EPOCHS):
        line = f"[{tag}] Epoch {epoch} | loss {0.1 * (epoch + 1):.4f} | printed by 0"
        assert lines.count(line) == 1, stdout
        assert f"[{tag}] Epoch {epoch} | snapshot saved | printed by 0" in lines, stdout


_PRINTED = re.compile(r"printed by (\d+)$")


def check_tags(lines: Iterable[Any]) -> None:
    """Every line the program printed (``LogLine``-shaped: source, rank, text) names the global rank that printed
    it, in its rank and in its source; every rank's lines are there."""
    program = [line for line in lines if _PRINTED.search(line.text)]
    assert len(program) == WORLD * EPOCHS + EPOCHS, [(x.source, x.text) for x in program]
    for line in program:
        printed = int(_PRINTED.search(line.text).group(1))  # type: ignore[union-attr]
        assert line.rank == printed and re.search(rf"(^|/)rank{printed}$", line.source), (line.source, line.text)
    assert {line.rank for line in program} == set(range(WORLD))


def check_tagged_json(logs_json: str) -> None:
    """``logs --json``: every program line tagged with its global rank."""

    class Line:
        def __init__(self, doc: dict[str, Any]) -> None:
            self.source, self.rank, self.text = doc["source"], doc["rank"], doc["text"]

    check_tags(Line(json.loads(line)) for line in logs_json.splitlines())
