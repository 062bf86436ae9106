"""Metrics from a framework's log files on the Slurm rig (both launches): the in-job launcher of global rank 0
reads the ``metrics.csv`` the script writes, wherever rank 0 ran, and the records come back through the Slurm
backend's own log reading. (The local backend, with a real Lightning run: tests/backends/local/
test_framework_metrics.py.)"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from tests.support.cli import cli
from tests.support.slurm_cluster import SlurmCluster

pytestmark = pytest.mark.slow

# What Lightning's CSVLogger writes on global rank 0 (its columns, its CRLF rows), without Lightning's start-up.
SCRIPT = """import os, time
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 0:
    os.makedirs("lightning_logs/version_0")
    with open("lightning_logs/version_0/metrics.csv", "w", newline="") as f:
        f.write("epoch,step,train_loss\\r\\n")
        for step in range(3):
            f.write(f"{step},{step},{1 / (step + 1):.4f}\\r\\n")
            f.flush()
            time.sleep(0.5)
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.timeout(500)
@pytest.mark.parametrize("launch", ["torchrun", "srun"])
def test_on_slurm_a_csv_loggers_rows_come_back_as_rank_0s_metrics(
    cluster: SlurmCluster, tmp_path: Path, launch: str
) -> None:
    code = tmp_path / "csv"
    code.mkdir()
    (code / "train.py").write_text(SCRIPT)
    job = tmp_path / "job.yaml"
    slurm = {"python": sys.executable, "kill_wait": 5, "launch": launch}
    resources = {"nodes": 2, "gpus_per_node": 0, "processes_per_node": 2}
    job.write_text(json.dumps({"name": "csv", "code": {"dir": str(code)}, "resources": resources, "slurm": slurm}))
    attached = cli("submit", str(job), "-b", "slurm", timeout=400)
    assert attached.returncode == 0, attached.stderr[-3000:]
    found = re.search(r"^submitted (\S+) \(", attached.stderr, re.MULTILINE)
    assert found, attached.stderr
    metrics = cli("metrics", found.group(1), "--json")
    records = [json.loads(line) for line in metrics.stdout.splitlines()]
    assert [(r["step"], r["epoch"], r["train_loss"]) for r in records] == [(0, 0, 1.0), (1, 1, 0.5), (2, 2, 0.3333)]
