"""A documented model of DDP step time, scaling efficiency and the cost of the whole job.

    step = compute + exposed communication
    compute = per-GPU batch / (the GPU's measured images/s on the network; see speed.py)
    all-reduce of S gradient bytes, hierarchical (ring inside the node, ring across nodes):
        intra = 2(G−1)/G · S / B_node           (NVLink or PCIe bus bandwidth inside the node)
        inter = 2(N−1)/N · S / (B_fabric · η) + 2(N−1)·α
    DDP overlaps the all-reduce with backward (≈ 2/3 of compute) bucket by bucket, except the last
    bucket (25 MB by default), so
        exposed = last-bucket share of (intra + inter) + max(0, intra + inter − OVERLAP · backward)
    efficiency = compute / step (throughput at N GPUs over N × one GPU's).

Constants (stated, not fitted per case): fabric efficiency η 0.80 of the line rate, latency α 5 µs on
InfiniBand/EFA and 30 µs on Ethernet (TCP), OVERLAP 0.9. ``tests/catalog/test_cost_model.py`` holds the model
to four published figures (PyTorch's DDP benchmark, Goyal et al. 2017, Horovod over 40 Gb Ethernet,
MLPerf Training v1.0 on two A100 nodes over HDR InfiniBand). Not modelled: the loss of per-GPU
efficiency when strong scaling shrinks the per-GPU batch, and input pipelines that cannot keep up.

The whole job (``estimate`` with ``overheads``): start-up (provisioning when billed, image pull, data
download), training, checkpoint writes, shutdown (model upload, teardown) and idle nodes before
scale-down, each priced at the size's hourly price × nodes; see overheads.py for what each cloud bills.

A :class:`StepTime` replaces the modelled step with a figure from elsewhere: the step time measured on a
finished run of the same job on the same size (cloudddp.catalog.stepstore), or ``resources.step_time`` for a
script whose speed the model cannot know. Its ``basis`` says which, and the estimate carries it.
"""

from __future__ import annotations

import csv
import functools
import math
from dataclasses import dataclass
from typing import NamedTuple

from cloudddp.catalog.overheads import Overheads
from cloudddp.catalog.speed import anchor
from cloudddp.paths import data_text
from cloudddp.plan import Estimate

FABRIC_EFFICIENCY = 0.80
OVERLAP = 0.9
BUCKET_BYTES = 25 * 2**20
LATENCY_S = {"infiniband": 5e-6, "efa": 5e-6, "ethernet": 30e-6}
ETHERNET_DEFAULT_GBPS = 10.0  # when the catalog has no figure for a non-RDMA size
CHECKPOINT_BYTES_PER_PARAM = 8  # fp32 weights + SGD momentum (src_train/train.py uses SGD with momentum)
MODEL_BYTES_PER_PARAM = 4  # the final fp32 weights rank 0 writes

KNOWN_MODELS = {
    # params, forward multiply-accumulates per sample (FLOPs = 2 × MACs; training ≈ 3 × forward)
    "resnet18": (11_173_962, 0.557e9),  # CIFAR stem at 32×32
    "resnet18-imagenet": (11_689_512, 0.0373e9),  # 1.82 GMACs at 224² × (32/224)²: the ImageNet stem on CIFAR
    "resnet50": (25_557_032, 4.1e9),  # at 224²
    "cnn": (100_000, 0.005e9),
}
DATASET_SAMPLES = {"cifar10": 50_000, "digits": 1_437, "synthetic": 5_000, "imagenet": 1_281_167}
DATASET_BYTES = {
    "cifar10": 60_000 * 32 * 32 * 3,  # 60,000 uint8 32×32×3 images: ≈ 184 MB
    "digits": 0.0,  # ships inside the scikit-learn wheel
    "synthetic": 0.0,  # generated in the job
    "imagenet": 138e9,  # the ILSVRC2012 training archive as image-net.org lists it (not re-checked here)
}


def flops_per_sample(model: str) -> float | None:
    known = KNOWN_MODELS.get(model)
    return 3 * 2 * known[1] if known else None


class StepTime(NamedTuple):
    """Seconds per optimizer step from a measurement, not the model, and where it comes from. A named tuple: cheaper
    to define than a frozen dataclass (~1 ms of every render)."""

    seconds: float
    basis: str
    steps: float | None = None
    """Optimizer steps of the whole job, when the measurement implies them (a script the model does not know)."""


@dataclass(frozen=True)
class Workload:
    """What the cost model knows of a job's training: its network's size and compute, the data, the epochs and the
    batch, and any step count or step time the spec gives."""

    params: int
    flops_per_sample: float  # forward + backward
    samples_per_epoch: int
    epochs: int
    per_gpu_batch: int
    grad_bytes_per_param: int = 4
    network: str = ""
    a100_images_per_s: float | None = None  # one A100 SXM on this network (speed.anchor)
    a100_basis: str = ""
    dataset_bytes: float = 0.0
    checkpoint_every: int = 0  # epochs between checkpoints; 0: none
    steps: float | None = None  # optimizer steps of the whole job when given directly (resources.steps)
    step_time: StepTime | None = None  # a step time that applies to every size (resources.step_time)

    def steps_for(self, world: int) -> float | None:
        """Optimizer steps of the whole job over ``world`` processes: given, or samples / global batch × epochs."""
        if self.steps is not None:
            return self.steps
        if self.samples_per_epoch and self.per_gpu_batch:
            return self.samples_per_epoch / (self.per_gpu_batch * world) * self.epochs
        return None


def workload_for_model(
    model: str,
    samples_per_epoch: int,
    epochs: int,
    per_gpu_batch: int,
    *,
    dataset_bytes: float = 0.0,
    checkpoint_every: int = 0,
) -> Workload | None:
    known = KNOWN_MODELS.get(model)
    if known is None:
        return None
    params, _ = known
    flops = flops_per_sample(model) or 0.0
    a100, basis = anchor(model, flops, flops_per_sample("resnet18") or flops)
    return Workload(
        params,
        flops,
        samples_per_epoch,
        epochs,
        per_gpu_batch,
        network=model,
        a100_images_per_s=a100,
        a100_basis=basis,
        dataset_bytes=dataset_bytes,
        checkpoint_every=checkpoint_every,
    )


@functools.cache
def peak_tflops(gpu: str) -> float | None:
    """Dense bf16 (or fp16 tensor) peak of a GPU family, from gpu_peaks.csv."""
    text = data_text("gpu_peaks.csv")
    for row in csv.DictReader(text.splitlines()):
        if row["gpu"] == gpu:
            for key in ("dense_bf16_tflops", "dense_fp16_tensor_tflops"):
                try:
                    return float(row[key].split()[0])
                except (ValueError, IndexError):
                    continue
    return None


def allreduce_seconds(
    grad_bytes: float, gpus_per_node: int, nodes: int, intranode_gb_s: float, fabric: str, fabric_gbps: float | None
) -> float:
    intra = 0.0
    if gpus_per_node > 1:
        intra = 2 * (gpus_per_node - 1) / gpus_per_node * grad_bytes / (max(intranode_gb_s, 1.0) * 1e9)
    inter = 0.0
    if nodes > 1:
        gbps = fabric_gbps or ETHERNET_DEFAULT_GBPS
        bandwidth = gbps / 8 * 1e9 * FABRIC_EFFICIENCY
        inter = 2 * (nodes - 1) / nodes * grad_bytes / bandwidth + 2 * (nodes - 1) * LATENCY_S.get(fabric, 30e-6)
    return intra + inter


def _transfer_s(nbytes: float, gbps: float) -> float:
    return nbytes * 8 / (gbps * 1e9) if nbytes and gbps else 0.0


class _Around(NamedTuple):
    """The parts of the job around its training, in seconds per node, and the billing increment (overheads.py);
    all zero without overheads, when the estimate is the training alone. A named tuple: cheaper to define than a
    frozen dataclass (~1 ms of every render)."""

    provision_unbilled: float = 0.0
    startup: float = 0.0
    checkpoint: float = 0.0
    shutdown: float = 0.0
    idle: float = 0.0
    increment: float = 1.0


def _around(workload: Workload, o: Overheads | None) -> _Around:
    """What ``o`` says the job spends around its training: provisioning, image pull and data download before it,
    checkpoint writes during it, the model upload and teardown after it, idle nodes before scale-down."""
    if o is None:
        return _Around()
    writes = workload.epochs // workload.checkpoint_every if workload.checkpoint_every > 0 else 0
    return _Around(
        provision_unbilled=0.0 if o.provision_billed else o.provision_s,
        startup=(
            (o.provision_s if o.provision_billed else 0.0)
            + _transfer_s(o.image_gb * 1e9, o.pull_gbps)
            + _transfer_s(workload.dataset_bytes, o.download_gbps)
        ),
        checkpoint=writes * _transfer_s(workload.params * CHECKPOINT_BYTES_PER_PARAM, o.checkpoint_gbps),
        shutdown=_transfer_s(workload.params * MODEL_BYTES_PER_PARAM, o.upload_gbps) + o.teardown_s,
        idle=o.idle_s,
        increment=max(o.billing_increment_s, 1e-9),
    )


def estimate(
    workload: Workload,
    *,
    gpus_per_node: int,
    nodes: int,
    images_per_s_per_gpu: float | None,
    intranode_gb_s: float,
    fabric: str,
    fabric_gbps: float | None,
    price_per_node_hour: float | None,
    overheads: Overheads | None = None,
    step_time: StepTime | None = None,
) -> Estimate | None:
    """Step time, efficiency and — with ``overheads`` — every billed part of the job and its cost.

    The step is modelled from ``images_per_s_per_gpu`` unless ``step_time`` (or the workload's own) gives it;
    None when neither is there, or when the job's number of steps is unknown.
    """
    world = gpus_per_node * nodes
    given = step_time or workload.step_time
    compute = workload.per_gpu_batch / images_per_s_per_gpu if images_per_s_per_gpu and workload.per_gpu_batch else None
    grad_bytes = workload.params * workload.grad_bytes_per_param
    comm = 0.0  # a network the model does not know (no parameter count): its all-reduce is not modelled
    if grad_bytes:
        comm = allreduce_seconds(grad_bytes, gpus_per_node, nodes, intranode_gb_s, fabric, fabric_gbps)
    last_bucket = min(1.0, BUCKET_BYTES / max(grad_bytes, 1))
    exposed = last_bucket * comm + max(0.0, comm - OVERLAP * (compute or 0.0) * 2 / 3) if comm else 0.0
    modelled = compute + exposed if compute is not None else None
    step = given.seconds if given is not None else modelled
    # Steps given in the spec, else those a measurement of this job implies, else samples / global batch × epochs.
    steps = workload.steps if workload.steps is not None else (given.steps if given is not None else None)
    steps = steps if steps is not None else workload.steps_for(world)
    if step is None or steps is None:
        return None
    training = steps * step
    epoch_s = training / workload.epochs if workload.epochs else None
    around = _around(workload, overheads)
    billed = (
        math.ceil((around.startup + training + around.checkpoint + around.shutdown + around.idle) / around.increment)
        * around.increment
    )
    price = price_per_node_hour * nodes if price_per_node_hour is not None else None

    def cost(seconds: float) -> float | None:
        return price * seconds / 3600 if price is not None else None

    return Estimate(
        images_per_s_per_gpu=images_per_s_per_gpu,
        step_s=step,
        compute_s=compute,
        comm_s=comm,
        exposed_comm_s=exposed,
        efficiency=compute / modelled if compute is not None and modelled else None,
        epoch_s=epoch_s,
        provision_unbilled_s=around.provision_unbilled,
        startup_s=around.startup,
        training_s=training,
        checkpoint_s=around.checkpoint,
        shutdown_s=around.shutdown,
        idle_s=around.idle,
        billed_s=float(billed),
        job_s=around.provision_unbilled + around.startup + training + around.checkpoint + around.shutdown,
        price_per_hour=price,
        startup_cost=cost(around.startup),
        training_cost=cost(training),
        checkpoint_cost=cost(around.checkpoint),
        shutdown_cost=cost(around.shutdown),
        idle_cost=cost(around.idle),
        total_cost=cost(billed),
        cost_per_epoch=cost(epoch_s) if epoch_s is not None else None,
        steps=steps,
        step_basis=given.basis if given is not None else "model",
    )
