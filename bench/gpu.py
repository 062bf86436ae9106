"""``make bench-gpu``: the throughput case on a CUDA machine, with the fraction of the GPU's dense bf16 peak.

Runs the shared script (bf16 autocast, channels_last, torch.compile) and the seed-style reference on
synthetic CIFAR-shaped data, one process per GPU, and writes bench/results/gpu.json and gpu.md.
"""

from __future__ import annotations

import json
import sys
import time

from .common import ROOT, machine
from .throughput import FLOPS, measure

# Dense bf16 TFLOPS by device-name fragment (cloudddp/data/gpu_peaks.csv; most specific first).
PEAKS = [
    ("H200", 989.5),
    ("H100 NVL", 835.5),
    ("H100 PCIe", 756.0),
    ("H100", 989.5),
    ("A100", 312.0),
    ("L40S", 362.0),
    ("L4", 121.0),
    ("A10G", 125.0),
    ("V100", 125.0),
    ("T4", 65.0),
]


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("bench-gpu: no CUDA device on this machine; run it where there is one", file=sys.stderr)
        return 1
    name = torch.cuda.get_device_name(0)
    peak = next((p for frag, p in PEAKS if frag in name), None)
    gpus = torch.cuda.device_count()
    results = measure(tiny=False, nproc=gpus, device="cuda")
    cifar = results[1].ours
    fraction = cifar * FLOPS["resnet18"] / (peak * 1e12 * gpus) if peak else None
    results[1].details["fraction_of_dense_bf16_peak"] = round(fraction, 3) if fraction else None
    results[1].target, results[1].passed = "≥ 30 % of dense bf16 peak", (fraction or 0) >= 0.30
    out = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "gpu": name,
        "gpus": gpus,
        "peak_tflops": peak,
        "machine": machine(),
        "results": [r.to_dict() for r in results],
    }
    folder = ROOT / "bench" / "results"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "gpu.json").write_text(json.dumps(out, indent=2))
    lines = [f"GPU run {out['date']}: {gpus}× {name} (dense bf16 peak {peak} TFLOPS)", ""]
    for r in results:
        ratio = f", {r.ratio:.2f}× the seed-style reference" if r.ratio else ""
        lines.append(f"- {r.metric}: {r.ours:,.0f} {r.unit}{ratio}; {r.details}")
    (folder / "gpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
