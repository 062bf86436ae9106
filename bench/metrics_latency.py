"""Metrics latency: from a metric line being written to it arriving through `cloudddp metrics -f` and the API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

from .common import ROOT, Result, percentile


def measure(tiny: bool) -> list[Result]:
    from cloudddp.api import Job

    count, interval = (10, 0.05) if tiny else (200, 0.05)
    job = Job.from_dict(
        {
            "name": "bench-metrics",
            "code": {
                "dir": str(ROOT / "bench" / "scripts"),
                "entry": "emit_metrics.py",
                "args": [str(count), str(interval)],
            },
            "local": {"processes_per_node": 1},
            "checkpoint": {"enabled": False},
        }
    )
    run = job.submit("local")
    cli = subprocess.Popen(
        [sys.executable, "-m", "cloudddp", "metrics", run.run_id, "-f", "--json"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    cli_latency: list[float] = []

    def read_cli() -> None:
        assert cli.stdout is not None
        for line in cli.stdout:
            arrived = time.time()
            cli_latency.append(arrived - json.loads(line)["time"])

    reader = threading.Thread(target=read_cli)
    reader.start()
    api_latency = [time.time() - r.time for r in run.metrics(follow=True) if r.time]
    cli.wait(timeout=120)
    reader.join()
    results = []
    for path, lat in (("Python API", api_latency), ("cloudddp metrics -f", cli_latency)):
        p50, p95 = percentile(lat, 50) * 1000, percentile(lat, 95) * 1000
        results.append(
            Result(
                case="metrics latency",
                metric=f"p95, {path}",
                ours=p95,
                theirs=None,
                unit="ms",
                better="lower",
                target="p95 ≤ 250 ms",
                passed=p95 <= 250 and len(lat) == count,
                details={"p50_ms": round(p50, 1), "p95_ms": round(p95, 1), "records": len(lat), "expected": count},
            )
        )
    return results
