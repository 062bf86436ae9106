"""Render latency: `cloudddp render` per cloud vs. a plain script building the same job with that cloud's SDK.

Both are timed as whole processes (interpreter start, imports, build, print), which is what a person
waits for. The SDK scripts are in bench/baselines/.
"""

from __future__ import annotations

import functools
import sys

from .common import ROOT, Result, cloudddp, median, run, timed

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
    return results
