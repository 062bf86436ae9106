"""One meaning for metrics and log tags, locally and on the Slurm rig: a 2-node × 2-process job whose every rank
prints the same measurement (tests/support/ranks.py) gives one record per measurement of global rank 0, the same
in the attached view as in ``metrics --json``, and every line of the program names the global rank that printed
it. (SageMaker: tests/backends/sagemaker/test_metric_meaning.py; Azure ML:
tests/backends/azureml/test_metric_meaning.py.)"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from tests.support import ranks
from tests.support.cli import cli
from tests.support.slurm_cluster import SlurmCluster

pytestmark = pytest.mark.slow


def submitted(stderr: str) -> str:
    """The run id of ``submitted <id> (<backend>)``."""
    found = re.search(r"^submitted (\S+) \(", stderr, re.MULTILINE)
    assert found, stderr
    return found.group(1)


@pytest.mark.timeout(400)
def test_locally_metrics_are_rank_0s_in_the_attached_view_and_metrics_json_and_every_line_names_its_rank(
    tmp_path: Path,
) -> None:
    job = ranks.write_job(tmp_path, local={"nodes": 2, "processes_per_node": 2})
    attached = cli("submit", str(job), "-b", "local", timeout=300)
    assert attached.returncode == 0, attached.stderr[-3000:]
    run_id = submitted(attached.stderr)
    metrics = cli("metrics", run_id, "--json")
    assert metrics.returncode == 0, metrics.stderr
    # Global rank 0 is wherever torchrun's rendezvous put it: its tag says which node it ran on.
    tag = next(t for t in ("node0/rank0", "node1/rank0") if f"[{t}] Epoch 0 | loss" in attached.stdout)
    ranks.check_attached(attached.stdout, metrics.stdout, tag)
    assert "printed by 1" not in attached.stdout and "printed by 3" not in attached.stdout  # rank 0's by default
    logs = cli("logs", run_id, "--json")
    assert logs.returncode == 0, logs.stderr
    ranks.check_tagged_json(logs.stdout)
    every = cli("logs", run_id)
    assert "torchrun runtime] " in every.stdout, every.stdout[-2000:]  # torchrun's own lines, marked as such


@pytest.mark.timeout(400)
def test_locally_a_job_that_reads_every_ranks_metrics_gets_each_ranks_records_naming_it(tmp_path: Path) -> None:
    job = ranks.write_job(tmp_path, local={"nodes": 2, "processes_per_node": 2})
    data = json.loads(job.read_text())
    job.write_text(json.dumps({**data, "metrics": {"declared": ranks.METRICS, "ranks": "all"}}))
    attached = cli("submit", str(job), "-b", "local", timeout=300)
    assert attached.returncode == 0, attached.stderr[-3000:]
    metrics = cli("metrics", submitted(attached.stderr), "--json")
    records = [json.loads(line) for line in metrics.stdout.splitlines()]
    every = sorted((r["rank"], r["epoch"], r["loss"]) for r in records)
    assert every == [(k, e, round(0.1 * (e + 1) + k, 4)) for k in range(ranks.WORLD) for e in range(ranks.EPOCHS)]
    lines, shown = ranks.attached_view(attached.stdout)
    assert shown == [], attached.stdout  # each rank's matched line once, as printed, not again as a record
    assert sum("Epoch 2 | loss 3.3000 | printed by 3" in line for line in lines) == 1, attached.stdout


@pytest.mark.timeout(500)
@pytest.mark.parametrize("launch", ["torchrun", "srun"])
def test_on_slurm_metrics_are_rank_0s_in_the_attached_view_and_metrics_json_and_every_line_names_its_rank(
    cluster: SlurmCluster, tmp_path: Path, launch: str
) -> None:
    job = ranks.write_job(tmp_path, slurm={"python": sys.executable, "kill_wait": 5, "launch": launch})
    attached = cli("submit", str(job), "-b", "slurm", timeout=400)
    assert attached.returncode == 0, attached.stderr[-3000:]
    run_id = submitted(attached.stderr)
    metrics = cli("metrics", run_id, "--json")
    assert metrics.returncode == 0, metrics.stderr
    tag = next(t for t in ("node0/rank0", "node1/rank0") if f"[{t}] Epoch 0 | loss" in attached.stdout)
    ranks.check_attached(attached.stdout, metrics.stdout, tag)
    logs = cli("logs", run_id, "--json")
    assert logs.returncode == 0, logs.stderr
    ranks.check_tagged_json(logs.stdout)
