"""Re-render: `cloudddp render -b sagemaker` of an unchanged folder holding a 600 MB file, against the
first render of it (which packs the folder; the re-render finds the snapshot by the folder's stat index).
A render of a 2-file folder, interleaved, shows what the same command costs with nothing to pack.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from .common import ROOT, Result, cloudddp, median
from .packaging import WORK, tree
from .process_stats import how_memory_is_measured, measured


def measure(tiny: bool) -> list[Result]:
    WORK.mkdir(parents=True, exist_ok=True)
    root, label = tree("one-file", tiny)
    reps = 2 if tiny else 7
    with tempfile.TemporaryDirectory(dir=WORK) as tmp:
        specs = {}
        for kind, folder in (("big", root), ("tiny", ROOT / "bench" / "scripts")):
            specs[kind] = Path(tmp) / f"{kind}.json"
            specs[kind].write_text(
                json.dumps(
                    {
                        "name": "bench-rerender",
                        "code": {"dir": str(folder)},
                        "resources": {"nodes": 1, "gpus_per_node": 1},
                        "sagemaker": {
                            "region": "us-east-1",
                            "role": "arn:aws:iam::123456789012:role/r",
                            "bucket": "bench",
                            "instance_type": "ml.g5.xlarge",
                            "image": "img:1",
                        },
                    }
                )
            )
        env = {"CLOUDDDP_HOME": str(Path(tmp) / "home")}
        big, tiny_folder = (cloudddp("render", str(specs[k]), "--backend", "sagemaker") for k in ("big", "tiny"))
        first = measured(big, env=env)
        again, small = [], []
        for _ in range(reps):  # interleaved with a render of a 2-file folder: the same machine noise for both
            again.append(measured(big, env=env))
            small.append(measured(tiny_folder, env=env).wall_s)
    second = median([m.wall_s for m in again])
    details = {
        "reps": reps,
        "tiny_folder_render_s": round(median(small), 3),
        "first_render_peak_mb": round(first.peak_mb, 1),
        "rerender_peak_mb": round(max(m.peak_mb for m in again), 1),
        "memory_from": how_memory_is_measured(),
    }
    return [
        Result(
            case="re-render",
            metric=f"unchanged folder with {label}: render again",
            ours=second,
            theirs=first.wall_s,
            unit="s",
            ratio=first.wall_s / second,
            better="higher ratio",
            baseline="first render (packs it)",
            target="< 0.5 s",
            passed=second < 0.5,
            details=details,
        ),
        Result(
            case="re-render",
            metric=f"first render of {label}: peak memory",
            ours=first.peak_mb,
            theirs=None,
            unit="MB",
            better="lower",
            target="< 100 MB",
            passed=first.peak_mb < 100,
            details={},
        ),
    ]
