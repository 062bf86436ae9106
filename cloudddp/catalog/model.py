"""A simple, documented model of DDP step time, scaling efficiency and cost.

    step = compute + exposed communication
    compute = per-GPU batch × FLOPs per sample / (GPU dense peak × MFU)
    all-reduce of S gradient bytes, hierarchical (ring inside the node, ring across nodes):
        intra = 2(G−1)/G · S / B_node           (NVLink or PCIe bus bandwidth inside the node)
        inter = 2(N−1)/N · S / (B_fabric · η) + 2(N−1)·α
    DDP overlaps the all-reduce with backward (≈ 2/3 of compute) bucket by bucket, except the last
    bucket (25 MB by default), so
        exposed = last-bucket share of (intra + inter) + max(0, intra + inter − OVERLAP · backward)
    efficiency = compute / step (throughput at N GPUs over N × one GPU's).

Constants (stated, not fitted per case): MFU 0.40 for large conv nets (per-model values in
KNOWN_MODELS, e.g. 0.13 for ResNet-18 at 32×32, from a measured A100 anchor), fabric
efficiency η 0.80 of the line rate, latency α 5 µs on InfiniBand/EFA and 30 µs on Ethernet (TCP),
OVERLAP 0.9. Checked in tests against published figures (PyTorch's DDP benchmark, ResNet-50 on 16
V100s over 4 × 100 Gb InfiniBand ≈ 93 %; Goyal et al. 2017, ResNet-50 on 256 P100s over 50 Gb
Ethernet ≈ 90 %).
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from importlib import resources

MFU = 0.40
FABRIC_EFFICIENCY = 0.80
OVERLAP = 0.9
BUCKET_BYTES = 25 * 2**20
LATENCY_S = {"infiniband": 5e-6, "efa": 5e-6, "ethernet": 30e-6}
ETHERNET_DEFAULT_GBPS = 10.0  # when the catalog has no figure for a non-RDMA size


@dataclass(frozen=True)
class Workload:
    params: int
    flops_per_sample: float  # forward + backward
    samples_per_epoch: int
    epochs: int
    per_gpu_batch: int
    grad_bytes_per_param: int = 4
    mfu: float = 0.40


KNOWN_MODELS = {
    # params, forward FLOPs per sample (×3 for forward + backward), achievable MFU
    # CIFAR-stem ResNet-18 on 32×32: small convolutions reach ~13 % of an A100's bf16 peak
    # (23,800 images/s × 1.67 GFLOPs ≈ 40 TFLOP/s; see shared anchors); ResNet-50 at 224² ~40 %.
    "resnet18": (11_173_962, 0.557e9, 0.13),
    "resnet18-imagenet": (11_689_512, 0.0373e9, 0.05),  # 1.82 GFLOPs at 224² × (32/224)²
    "resnet50": (25_557_032, 4.1e9, MFU),
    "cnn": (100_000, 0.005e9, 0.02),
}
DATASET_SAMPLES = {"cifar10": 50_000, "digits": 1_437, "synthetic": 5_000, "imagenet": 1_281_167}


def workload_for_model(model: str, samples_per_epoch: int, epochs: int, per_gpu_batch: int) -> Workload | None:
    known = KNOWN_MODELS.get(model)
    if known is None:
        return None
    params, fwd, mfu = known
    return Workload(params, 3 * fwd, samples_per_epoch, epochs, per_gpu_batch, mfu=mfu)


@functools.cache
def peak_tflops(gpu: str) -> float | None:
    """Dense bf16 (or fp16 tensor) peak of a GPU family, from gpu_peaks.csv."""
    text = resources.files("cloudddp").joinpath("data/gpu_peaks.csv").read_text(encoding="utf-8")
    for row in csv.DictReader(text.splitlines()):
        if row["gpu"] == gpu:
            for key in ("dense_bf16_tflops", "dense_fp16_tensor_tflops"):
                try:
                    return float(row[key].split()[0])
                except (ValueError, IndexError):
                    continue
    return None


@dataclass(frozen=True)
class Estimate:
    step_s: float
    compute_s: float
    comm_s: float
    exposed_comm_s: float
    efficiency: float
    epoch_s: float | None
    job_s: float | None
    price_per_hour: float | None  # all nodes
    cost_per_epoch: float | None
    total_cost: float | None

    def to_dict(self) -> dict[str, float | None]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def allreduce_seconds(grad_bytes: float, gpus_per_node: int, nodes: int, intranode_gb_s: float,
                      fabric: str, fabric_gbps: float | None) -> float:
    intra = 0.0
    if gpus_per_node > 1:
        intra = 2 * (gpus_per_node - 1) / gpus_per_node * grad_bytes / (max(intranode_gb_s, 1.0) * 1e9)
    inter = 0.0
    if nodes > 1:
        gbps = fabric_gbps or ETHERNET_DEFAULT_GBPS
        bandwidth = gbps / 8 * 1e9 * FABRIC_EFFICIENCY
        inter = 2 * (nodes - 1) / nodes * grad_bytes / bandwidth + 2 * (nodes - 1) * LATENCY_S.get(fabric, 30e-6)
    return intra + inter


def estimate(workload: Workload, *, gpus_per_node: int, nodes: int, peak: float, intranode_gb_s: float,
             fabric: str, fabric_gbps: float | None, price_per_node_hour: float | None) -> Estimate:
    compute = workload.per_gpu_batch * workload.flops_per_sample / (peak * 1e12 * workload.mfu)
    grad_bytes = workload.params * workload.grad_bytes_per_param
    comm = allreduce_seconds(grad_bytes, gpus_per_node, nodes, intranode_gb_s, fabric, fabric_gbps)
    last_bucket = min(1.0, BUCKET_BYTES / max(grad_bytes, 1))
    backward = compute * 2 / 3
    exposed = last_bucket * comm + max(0.0, comm - OVERLAP * backward) if comm else 0.0
    step = compute + exposed
    world = gpus_per_node * nodes
    steps_per_epoch = workload.samples_per_epoch / (workload.per_gpu_batch * world)
    epoch_s = steps_per_epoch * step
    job_s = epoch_s * workload.epochs
    price = price_per_node_hour * nodes if price_per_node_hour is not None else None
    return Estimate(
        step_s=step, compute_s=compute, comm_s=comm, exposed_comm_s=exposed, efficiency=compute / step,
        epoch_s=epoch_s, job_s=job_s, price_per_hour=price,
        cost_per_epoch=price * epoch_s / 3600 if price is not None else None,
        total_cost=price * job_s / 3600 if price is not None else None,
    )
