"""Render latency: `cloudddp render` per cloud vs. a plain script building the same job with that cloud's SDK,
and the Azure ML render vs. the same render by a simpler cloudddp (commit BASELINE), side by side.

All are timed as whole processes (interpreter start, imports, build, print), which is what a person
waits for. The SDK scripts are in bench/baselines/; the baseline's package is taken from git history into a
temporary folder and run with the same interpreter and packages, both with their bytecode compiled first (as
an installed package has it). The Azure ML row also records the import profile of a render (``python -X
importtime``): the modules whose own import took longest.
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from .common import ROOT, Result, cloudddp, median, run, timed

BASELINE = "7e7a2a5"
"""A cloudddp whose render does less (no pathspec ignore rules, no cost estimate, no runtime contract checks): the
render's whole-process time is held at or below its time."""

CASES = {
    "azureml": ("jobs/cifar10-azureml.yaml", "baselines/azureml_sdk_job.py", "azure-ai-ml command() + dump"),
    "sagemaker": ("jobs/cifar10-smddp.yaml", "baselines/sagemaker_sdk_job.py", "SageMaker SDK"),
}


SDK_PYTHON = ROOT / ".venv-sdk" / "bin" / "python"  # `make bench` puts the SageMaker SDK (~1 GB) here
SDK_READY = ROOT / ".venv-sdk" / ".installed"


def measure(tiny: bool) -> list[Result]:
    reps = 1 if tiny else 7
    results = []
    for backend, (job, baseline, label) in CASES.items():
        ours_cmd = cloudddp("render", str(ROOT / job), "--backend", backend)
        python = str(SDK_PYTHON) if backend == "sagemaker" and SDK_READY.exists() else sys.executable
        theirs_cmd = [python, str(ROOT / "bench" / baseline), str(ROOT / "src_train")]
        first = run(theirs_cmd).stdout.splitlines()
        if first and first[0].startswith("baseline: "):
            label = first[0].removeprefix("baseline: ")
        run(ours_cmd)  # warm the file cache for both before timing
        ours, theirs = [], []
        for _ in range(reps):
            ours.append(timed(functools.partial(run, ours_cmd)))
            theirs.append(timed(functools.partial(run, theirs_cmd)))
        o, t = median(ours), median(theirs)
        results.append(
            Result(
                case="render latency",
                metric=f"{backend}: whole process",
                ours=o,
                theirs=t,
                unit="s",
                ratio=t / o,
                better="higher ratio",
                baseline=label,
                target="≥ 10× faster",
                passed=t / o >= 10,
                details={"reps": reps},
            )
        )
    azure = next(r for r in results if r.metric.startswith("azureml"))
    results += _against_baseline(reps, sdk_ratio=azure.ratio)
    return results


def _against_baseline(reps: int, sdk_ratio: float | None = None) -> list[Result]:
    """The Azure ML render of this tree vs. at :data:`BASELINE`, alternating, in one run; [] without git history.

    Met when the render takes no longer than the baseline's in this run (≥ 1.0×), and only then: ``sdk_ratio``
    (azure-ai-ml's time over ours, measured in the same run) is recorded beside it, not counted."""
    job = "jobs/cifar10-azureml.yaml"
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "archive", BASELINE, "cloudddp", "jobs", "src_train"], cwd=ROOT, capture_output=True
        )
        if archive.returncode != 0:
            print(f"render: no {BASELINE} in this clone's history; the comparison row is left out", file=sys.stderr)
            return []
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        # Both trees with their bytecode, as an installed package has it (pip compiles at install): with
        # PYTHONDONTWRITEBYTECODE set, every import would otherwise compile the source again on each run.
        for tree in (ROOT / "cloudddp", Path(tmp) / "cloudddp"):
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree)], check=True, capture_output=True)
        ours_cmd = cloudddp("render", str(ROOT / job), "--backend", "azureml")
        then_cmd = [sys.executable, "-m", "cloudddp", "render", str(Path(tmp) / job), "--backend", "azureml"]
        then_env = {"PYTHONPATH": tmp}
        run(ours_cmd)
        run(then_cmd, env=then_env, cwd=Path(tmp))
        ours, then = [], []
        for _ in range(reps):
            ours.append(timed(functools.partial(run, ours_cmd)))
            then.append(timed(functools.partial(run, then_cmd, env=then_env, cwd=Path(tmp))))
    o, t = median(ours), median(then)
    return [
        Result(
            case="render latency",
            metric=f"azureml: whole process, against {BASELINE}",
            ours=o,
            theirs=t,
            unit="s",
            ratio=t / o,
            better="higher ratio",
            baseline=f"cloudddp at {BASELINE}",
            target=f"≤ {BASELINE}'s time",
            passed=o <= t,
            details={
                "reps": reps,
                "against azure-ai-ml": f"{sdk_ratio:.2f}×" if sdk_ratio is not None else "not measured",
                "slowest imports": import_profile(ours_cmd),
            },
        )
    ]


def import_profile(argv: list[str], top: int = 8) -> list[str]:
    """The modules whose own import time (``-X importtime``'s self column) was longest, as 'module: N ms'."""
    result = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], capture_output=True, text=True, cwd=ROOT)
    rows = []
    for line in result.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if match:
            rows.append((int(match.group(1)), match.group(4)))
    return [f"{name}: {us / 1000:.1f} ms" for us, name in sorted(rows, reverse=True)[:top]]
