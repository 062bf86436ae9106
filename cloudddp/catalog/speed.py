"""How fast one GPU trains a network, from published measurements (``cloudddp/data/throughput.csv``).

Two numbers make a GPU's training throughput on a network:

* the network's throughput on one A100 SXM (``anchor``), measured where a measurement exists;
* the GPU's speed relative to an A100 SXM (``speed``), the ratio of two ResNet-50 training throughputs
  measured in the same study (same software, same per-GPU batch), or a stated assumption where no
  measurement was found.

Assumptions, per GPU (each is listed with its reason in ``speed_basis``):

* H100 NVL: the H100 SXM measurement scaled by the dense-peak ratio (835.5 / 989.5, same Hopper design).
* H200: the H100 SXM measurement (same compute; its extra memory bandwidth is not credited).
* A100 SXM 40GB: the A100 SXM 80GB measurement.
* T4, L4, L40S, A10G, A10: ``min(peak ratio, memory-bandwidth ratio)`` against the A100 SXM 80GB; convolution
  training is bound by one of the two. On the GPUs that do have a measurement this rule lands 15-20 % low
  (V100: 0.40 vs 0.49 measured; H100 SXM: 1.64 vs 1.96), which ``tests/catalog/test_cost_model.py`` checks.
* Non-CUDA accelerators (MI300X, Trainium): no estimate.
* Networks without an A100 measurement: the achieved FLOP rate of the CIFAR ResNet-18 measurement.
"""

from __future__ import annotations

import csv
import functools
from typing import NamedTuple

from cloudddp.paths import data_text

BASELINE = "A100 SXM"
RATIO_NETWORK = "resnet50"
ANCHOR_NETWORK = "resnet18"  # the network whose achieved FLOP rate stands in for unmeasured networks

# gpu_key -> (gpu, variant) of its row in gpu_peaks.csv, for the assumption rule
_PEAK_ROWS = {
    "A100 SXM": ("A100", "SXM4 80GB"),
    "V100": ("V100", "SXM2 16/32GB"),
    "H100 SXM": ("H100", "SXM5 80GB"),
    "H100 NVL": ("H100", "NVL 94GB (PCIe+NVLink bridge)"),
    "T4": ("T4", "PCIe 16GB"),
    "L4": ("L4", "PCIe 24GB"),
    "L40S": ("L40S", "PCIe 48GB"),
    "A10G": ("A10G", "PCIe 24GB (AWS-specific)"),
    "A10": ("A10", "PCIe 24GB"),
}
_BY_RULE = ("T4", "L4", "L40S", "A10G", "A10")


class Measurement(NamedTuple):
    """A published training throughput of one GPU on one network (``throughput.csv``), with its source. A named
    tuple: cheaper to define than a frozen dataclass (~1 ms of every render)."""

    gpu_key: str
    network: str
    study: str
    framework: str
    images_per_s_per_gpu: float
    source: str
    date: str


@functools.cache
def measurements() -> tuple[Measurement, ...]:
    text = data_text("throughput.csv")
    return tuple(
        Measurement(
            r["gpu_key"],
            r["network"],
            r["study"],
            r["framework"],
            float(r["images_per_s_per_gpu"]),
            r["source"],
            r["date"],
        )
        for r in csv.DictReader(text.splitlines())
    )


@functools.cache
def _peak_row(gpu_key: str) -> tuple[float, float] | None:
    """(dense fp16/bf16 TFLOP/s, memory GB/s) of a GPU from gpu_peaks.csv."""
    wanted = _PEAK_ROWS.get(gpu_key)
    text = data_text("gpu_peaks.csv")
    for row in csv.DictReader(text.splitlines()):
        if wanted and (row["gpu"], row["variant"]) == wanted:
            peak = next(
                (
                    float(row[k].split()[0])
                    for k in ("dense_bf16_tflops", "dense_fp16_tensor_tflops")
                    if row[k].split() and row[k].split()[0].replace(".", "").isdigit()
                ),
                None,
            )
            return (peak, float(row["mem_bw_gb_s"])) if peak else None
    return None


def gpu_key(gpu: str, gpu_model: str) -> str:
    """The key a catalog GPU has in the measurement tables (form factors that differ get their own key)."""
    if gpu == "A100":
        return "A100 PCIe" if "PCIe" in gpu_model else BASELINE
    if gpu == "H100":
        return "H100 NVL" if "NVL" in gpu_model else "H100 SXM"
    return gpu


def measured_speed(key: str) -> tuple[float, Measurement, Measurement] | None:
    """The speed of ``key`` relative to the A100 SXM from one study that measured both, if any."""
    for m in measurements():
        if m.gpu_key != key or m.network != RATIO_NETWORK:
            continue
        base = next(
            (b for b in measurements() if b.gpu_key == BASELINE and b.network == RATIO_NETWORK and b.study == m.study),
            None,
        )
        if base is not None:
            return m.images_per_s_per_gpu / base.images_per_s_per_gpu, m, base
    return None


def rule_speed(key: str) -> float | None:
    """The stated assumption for GPUs without a measurement: min(peak ratio, memory-bandwidth ratio) vs the A100."""
    mine, base = _peak_row(key), _peak_row(BASELINE)
    if mine is None or base is None:
        return None
    return min(mine[0] / base[0], mine[1] / base[1])


def speed(key: str) -> float | None:
    """Training speed of one GPU relative to one A100 SXM; None for accelerators the model does not cover."""
    if key == BASELINE:
        return 1.0
    measured = measured_speed(key)
    if measured is not None:
        return measured[0]
    if key == "H100 NVL":
        h100, nvl = _peak_row("H100 SXM"), _peak_row("H100 NVL")
        sxm = speed("H100 SXM")
        return sxm * nvl[0] / h100[0] if h100 and nvl and sxm else None
    if key == "H200":
        return speed("H100 SXM")
    if key in _BY_RULE:
        return rule_speed(key)
    return None


def speed_basis(key: str) -> str:
    """Where ``speed(key)`` comes from, in words."""
    if key == BASELINE:
        return "baseline"
    measured = measured_speed(key)
    if measured is not None:
        _, m, base = measured
        return (
            f"measured: ResNet-50 {m.images_per_s_per_gpu:g} vs {base.images_per_s_per_gpu:g} img/s per GPU "
            f"({m.study}, {m.date})"
        )
    return {
        "H100 NVL": "assumed: H100 SXM measurement × dense-peak ratio 835.5/989.5",
        "H200": "assumed: equal to the H100 SXM measurement (same compute)",
    }.get(
        key,
        "assumed: min(peak ratio, memory-bandwidth ratio) vs A100 SXM 80GB"
        if key in _BY_RULE
        else "no estimate (not covered)",
    )


def anchor(network: str, flops_per_sample: float, anchor_flops: float) -> tuple[float, str]:
    """Images/s of one A100 SXM on ``network`` (PyTorch measurements preferred), and where the figure comes from.

    Without a measurement: the achieved FLOP rate of the CIFAR ResNet-18 anchor (``anchor_flops`` FLOPs per
    sample) spread over this network's ``flops_per_sample`` — an assumption, shown as such.
    """
    rows = [m for m in measurements() if m.gpu_key == BASELINE and m.network == network]
    rows.sort(key=lambda m: "PyTorch" not in m.framework)
    if rows:
        return rows[0].images_per_s_per_gpu, f"measured ({rows[0].study}, {rows[0].date})"
    base = next(m for m in measurements() if m.gpu_key == BASELINE and m.network == ANCHOR_NETWORK)
    return base.images_per_s_per_gpu * anchor_flops / flops_per_sample, "assumed: CIFAR ResNet-18's achieved FLOP rate"
