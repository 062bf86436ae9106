"""Run history at scale: `cloudddp list` and `cloudddp status` with 10,000 runs in the registry against
the same commands with 10, and `cloudddp metrics` of a local run with a million metric lines.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from .common import ROOT, Result, cloudddp, median
from .packaging import WORK
from .process_stats import how_memory_is_measured, measured

sys.path.insert(0, str(ROOT))


def _registry_home(parent: Path, runs: int) -> tuple[dict[str, str], str]:
    """A cloudddp home with ``runs`` runs; the newest is a finished local run (so `status` can read it)."""
    from cloudddp.backends.local.rundir import RunDir
    from cloudddp.runs.database import RunDatabase
    from tests.support.runs import fill

    home = parent / f"home-{runs}"
    ids = fill(RunDatabase(home / "runs.db"), runs)
    run = RunDir(home / "runs" / ids[-1])
    run.path.mkdir(parents=True)
    run.write_status(state="succeeded", nodes=1, created_at=1e9 + runs)
    with RunDatabase(home / "runs.db")._connect() as db:
        db.execute("UPDATE runs SET backend = 'local' WHERE run_id = ?", (ids[-1],))
    return {"CLOUDDDP_HOME": str(home)}, ids[-1]


def _metrics_home(parent: Path, lines: int) -> tuple[dict[str, str], str]:
    from cloudddp.backends.local.rundir import RunDir
    from cloudddp.runs.database import RunDatabase

    home, run_id = parent / "home-metrics", "long-20250101-000000-abcd"
    RunDatabase(home / "runs.db").add(run_id, "local", "long", "succeeded")
    run = RunDir(home / "runs" / run_id)
    run.path.mkdir(parents=True)
    run.write_status(state="succeeded", nodes=1)
    with open(run.metrics, "w") as f:
        f.writelines(
            json.dumps({"step": s, "epoch": s // 1000, "time": 1.7e9 + s, "train_loss": 1 / (s + 1)}) + "\n"
            for s in range(lines)
        )
    return {"CLOUDDDP_HOME": str(home)}, run_id


def measure(tiny: bool) -> list[Result]:
    WORK.mkdir(parents=True, exist_ok=True)
    few, many, lines, reps = (10, 100, 10_000, 2) if tiny else (10, 10_000, 1_000_000, 7)
    results = []
    with tempfile.TemporaryDirectory(dir=WORK) as tmp:
        homes = {n: _registry_home(Path(tmp), n) for n in (few, many)}
        for command in ("list", "status"):
            argvs = {
                n: cloudddp("list", "-n", str(few)) if command == "list" else cloudddp("status", newest[:12])
                for n, (_, newest) in homes.items()
            }
            times: dict[int, list[float]] = {few: [], many: []}
            for n, (env, _) in homes.items():
                measured(argvs[n], env=env)  # warm the file cache
            for _ in range(reps):  # interleaved, so both sizes see the same machine noise
                for n, (env, _) in homes.items():
                    times[n].append(measured(argvs[n], env=env).wall_s)
            ours, theirs = median(times[many]), median(times[few])
            what = f"cloudddp list -n {few}" if command == "list" else "cloudddp status <id prefix>"
            results.append(
                Result(
                    case="run history",
                    metric=f"{what} with {many:,} runs",
                    ours=ours,
                    theirs=theirs,
                    unit="s",
                    ratio=theirs / ours,
                    better="higher ratio",
                    baseline=f"the same with {few} runs",
                    target=f"≤ 1.25× the {few}-run time",
                    passed=ours <= 1.25 * theirs,
                    details={"reps": reps},
                )
            )
        env, run_id = _metrics_home(Path(tmp), lines)
        m = measured(cloudddp("metrics", run_id, "--json"), env=env)
    results.append(
        Result(
            case="run history",
            metric=f"cloudddp metrics --json of a {lines:,}-line run: peak memory",
            ours=m.peak_mb,
            theirs=None,
            unit="MB",
            better="lower",
            target="< 100 MB",
            passed=m.peak_mb < 100,
            details={"wall_s": round(m.wall_s, 2), "memory_from": how_memory_is_measured()},
        )
    )
    return results
