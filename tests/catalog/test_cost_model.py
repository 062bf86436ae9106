"""The scaling and cost model held to published numbers, per-GPU speeds from measurements, and whole-job cost.

Every figure below carries its source and date next to it; cloudddp/data/SOURCES.md lists them again.
"""

from __future__ import annotations

import pytest

from cloudddp.backends.plugins import load_spec
from cloudddp.catalog import (
    Requirements,
    find,
    overheads,
    select,
    speed,
    speed_basis,
    workload_for_model,
)
from cloudddp.catalog.model import DATASET_BYTES, Estimate, Workload, estimate
from cloudddp.catalog.overheads import Overheads
from cloudddp.catalog.sizing import requirements_for
from cloudddp.catalog.speed import gpu_key, measured_speed, rule_speed
from cloudddp.runs.runner import get_backend
from tests.support.cli import ROOT

TOLERANCE = 0.15  # each published figure is reproduced within 15 %


def _net(params: int, per_gpu_batch: int) -> Workload:
    """A network for the scaling model: only the gradient size and the batch matter here."""
    return Workload(params, 1.0, 1_000_000, 1, per_gpu_batch)


def _close(model: float, published: float) -> bool:
    return abs(model - published) / published < TOLERANCE


# --- scaling: four published figures -----------------------------------------------------------------


def test_pytorch_ddp_benchmark_resnet50_on_16_v100_over_100gb_infiniband_is_about_93_percent() -> None:
    """pytorch/benchmarks distributed/ddp README: ResNet-50 fp32, batch 32, 16 V100 (4 nodes × 4 NVLink GPUs),
    100 Gb/s InfiniBand, ~93 % scaling efficiency. One V100's fp32 ResNet-50 throughput: 367 img/s (NVIDIA
    DeepLearningExamples PyTorch resnet50v1.5 README @291f0d0, DGX-1 16GB, 1 GPU, FP32; NGC 21.03)."""
    e = estimate(
        _net(25_557_032, 32),
        gpus_per_node=4,
        nodes=4,
        images_per_s_per_gpu=367,
        intranode_gb_s=130,
        fabric="infiniband",
        fabric_gbps=100,
        price_per_node_hour=None,
    )
    assert _close(e.efficiency, 0.93), e.efficiency


def test_goyal_2017_resnet50_on_256_p100_over_50gb_ethernet_is_about_90_percent() -> None:
    """Goyal et al. 2017, "Accurate, Large Minibatch SGD" (arXiv:1706.02677): ResNet-50, batch 32 per GPU, 256 P100
    in 32 Big Basin servers (8 NVLink GPUs, ~80 GB/s), 50 Gb Ethernet, ~90 % scaling efficiency. Per-GPU speed from
    the same paper's 8-GPU baseline: 90 epochs of 1,281,167 images in 29 hours on 8 GPUs (138 img/s per GPU)."""
    per_gpu = 1_281_167 * 90 / (29 * 3600) / 8
    e = estimate(
        _net(25_557_032, 32),
        gpus_per_node=8,
        nodes=32,
        images_per_s_per_gpu=per_gpu,
        intranode_gb_s=80,
        fabric="ethernet",
        fabric_gbps=50,
        price_per_node_hour=None,
    )
    assert _close(e.efficiency, 0.90), e.efficiency


def test_horovod_resnet101_on_64_pascal_gpus_over_40gb_ethernet_is_89_percent() -> None:
    """Horovod README (horovod/horovod, 2017 benchmark table): 16 servers × 4 Pascal GPUs on a plain 40 Gbit/s
    network, TCP Horovod with NCCL all-reduce: ResNet-101 at batch 64, 136.0 img/s on one GPU and 7,741.6 img/s
    on 64 GPUs (56.9×, 88.9 %). A slow fabric. Inside a server: PCIe, 12 GB/s (the README does not say; assumed).
    ResNet-101 has 44,549,160 parameters (torchvision)."""
    published = 7_741.6 / (64 * 136.0)
    e = estimate(
        _net(44_549_160, 64),
        gpus_per_node=4,
        nodes=16,
        images_per_s_per_gpu=136.0,
        intranode_gb_s=12,
        fabric="ethernet",
        fabric_gbps=40,
        price_per_node_hour=None,
    )
    assert _close(e.efficiency, published), (e.efficiency, published)
    # the same table's VGG-16 (138M parameters, 149.6 img/s on one GPU) reaches 40.7× (63.6 %): the model does not
    # reproduce that figure (it says 83 %) but keeps the order: more gradient per image, lower efficiency
    vgg = estimate(
        _net(138_357_544, 64),
        gpus_per_node=4,
        nodes=16,
        images_per_s_per_gpu=149.6,
        intranode_gb_s=12,
        fabric="ethernet",
        fabric_gbps=40,
        price_per_node_hour=None,
    )
    assert vgg.efficiency < e.efficiency


def test_mlperf_v1_0_resnet50_on_two_a100_nodes_over_hdr_infiniband_keeps_93_percent_per_gpu() -> None:
    """MLPerf Training v1.0, Dell (mlcommons/training_results_v1.0, results commit 8200377, 2021-06-30): ResNet-50 at
    408 images per GPU on XE8545 servers (4× A100-SXM-80GB, NVLink 3, 2× ConnectX-6 HDR 200 Gb/s InfiniBand).
    One server: median epoch 94.422 s (13,569 img/s); two servers: 50.832 s (25,204 img/s), i.e. 92.9 % of twice
    one server's throughput (epoch times from the result_0.txt logs of both systems)."""
    per_gpu = 13_569 / 4
    one = estimate(
        _net(25_557_032, 408),
        gpus_per_node=4,
        nodes=1,
        images_per_s_per_gpu=per_gpu,
        intranode_gb_s=230,
        fabric="infiniband",
        fabric_gbps=400,
        price_per_node_hour=None,
    )
    two = estimate(
        _net(25_557_032, 408),
        gpus_per_node=4,
        nodes=2,
        images_per_s_per_gpu=per_gpu,
        intranode_gb_s=230,
        fabric="infiniband",
        fabric_gbps=400,
        price_per_node_hour=None,
    )
    assert _close(two.efficiency / one.efficiency, 25_204 / (2 * 13_569))


def test_multi_node_over_ethernet_predicts_poor_scaling_and_one_node_needs_no_fabric() -> None:
    w = workload_for_model("resnet18", 50_000, 1, 256)
    assert w is not None and w.a100_images_per_s
    slow = estimate(
        w,
        gpus_per_node=1,
        nodes=8,
        images_per_s_per_gpu=w.a100_images_per_s,
        intranode_gb_s=0,
        fabric="ethernet",
        fabric_gbps=20,
        price_per_node_hour=1.0,
    )
    fast = estimate(
        w,
        gpus_per_node=8,
        nodes=1,
        images_per_s_per_gpu=w.a100_images_per_s,
        intranode_gb_s=230,
        fabric="ethernet",
        fabric_gbps=None,
        price_per_node_hour=1.0,
    )
    assert slow.efficiency < 0.5 < fast.efficiency
    assert fast.exposed_comm_s < slow.exposed_comm_s


# --- compute: per-GPU speed from measurements --------------------------------------------------------


def test_an_h100_trains_cifar_resnet18_at_the_measured_h100_to_a100_ratio_not_three_times_an_a100() -> None:
    """The A100 anchor: ~23,800 CIFAR ResNet-18 images/s (fp16, channels_last; shared notes, anchors.md). H100 SXM vs
    A100 SXM, ResNet-50, MLPerf Training v3.0 (Dell XE9680, mlcommons/training_results_v3.0 @63e326c, 2023-06-19):
    7,011 vs 3,578 img/s per GPU = 1.96×. Scaling by dense peak instead (989.5 / 312 = 3.2×) gave ~72,000 img/s."""
    w = workload_for_model("resnet18", 50_000, 30, 256)
    assert w is not None and w.a100_images_per_s == 23_800
    p5 = find("ml.p5.48xlarge")
    assert p5 is not None
    h100 = w.a100_images_per_s * (speed(gpu_key(p5.gpu, p5.gpu_model)) or 0)
    assert abs(h100 - 23_800 * 7_011 / 3_578) < 1 and 45_000 < h100 < 48_000
    chosen = select(Requirements("aws", nodes=1, gpus_per_node=8, accelerator="H100", workload=w)).chosen
    assert (
        chosen is not None
        and chosen.estimate is not None
        and chosen.estimate.images_per_s_per_gpu == pytest.approx(h100)
    )


def test_every_cuda_gpu_in_the_catalog_has_a_speed_with_a_stated_basis() -> None:
    from cloudddp.catalog import all_skus

    for sku in all_skus():
        key = gpu_key(sku.gpu, sku.gpu_model)
        basis = speed_basis(key)
        if sku.cuda:
            assert speed(key), key
            assert basis.split(":")[0] in ("baseline", "measured", "assumed"), (key, basis)
        else:
            assert speed(key) is None and basis.startswith("no estimate")
    measured = {k for k in ("V100", "A100 PCIe", "H100 SXM") if measured_speed(k)}
    assert measured == {"V100", "A100 PCIe", "H100 SXM"}


def test_the_assumption_for_unmeasured_gpus_is_checked_against_the_measured_ones() -> None:
    """min(peak ratio, memory-bandwidth ratio) vs the A100 SXM 80GB stands in for T4, L4, L40S and A10G. On V100
    (measured 0.49×) and H100 SXM (measured 1.96×) it lands 15-20 % low: a conservative rule, not a fitted one."""
    for key in ("V100", "H100 SXM"):
        measured = speed(key) or 0
        assumed = rule_speed(key) or 0
        assert 0.75 * measured < assumed < measured, (key, assumed, measured)
    assert (speed("L4") or 1) < (speed("A10G") or 0) < (speed("L40S") or 0) < 1


# --- the whole job --------------------------------------------------------------------------------------


def test_sagemaker_bills_from_training_start_and_azure_from_allocation_with_idle_nodes() -> None:
    """SageMaker: billed between TrainingStartTime and TrainingEndTime, which includes the data download and the
    artifact upload (DescribeTrainingJob docs, botocore 1.44.5); waiting for instances is not billed. Azure ML: a
    node is billed from allocation to release, including the cluster's idle time before scale-down."""
    w = workload_for_model("resnet18", 50_000, 30, 256, dataset_bytes=DATASET_BYTES["cifar10"], checkpoint_every=1)
    assert w is not None and w.a100_images_per_s
    aws, azure = overheads("aws"), overheads("azure")
    assert aws is not None and azure is not None
    rate = w.a100_images_per_s

    def on(o: Overheads) -> Estimate:
        return estimate(
            w,
            gpus_per_node=8,
            nodes=2,
            images_per_s_per_gpu=rate,
            intranode_gb_s=230,
            fabric="efa",
            fabric_gbps=400,
            price_per_node_hour=20.0,
            overheads=o,
        )

    sm, aml = on(aws), on(azure.with_idle(600))
    assert sm.provision_unbilled_s == aws.provision_s > 0 and sm.idle_s == 0
    assert aml.provision_unbilled_s == 0 and aml.startup_s > azure.provision_s and aml.idle_s == 600
    for e in (sm, aml):
        parts = e.breakdown()
        assert all(s >= 0 and c is not None for s, c in parts.values())
        rounding = e.total_cost - sum(c for _, c in parts.values() if c)  # type: ignore[operator]
        assert 0 <= rounding < 40.0 / 3600  # billed per second: at most one second of both nodes
        assert e.checkpoint_s > 0 and e.shutdown_s > 0 and e.training_s > 0
    assert (
        (aml.total_cost or 0) > (sm.total_cost or 0) > 0
    )  # the same job: provisioning and ten idle minutes are billed on Azure ML


def test_the_spec_idle_time_reaches_the_azure_estimate() -> None:
    spec = load_spec(ROOT / "jobs" / "cifar10-azureml.yaml", ["azureml.idle_time_before_scale_down=900"])
    chosen = select(requirements_for(spec, get_backend("azureml").size_target(spec))).chosen
    assert chosen is not None and chosen.estimate is not None and chosen.estimate.idle_s == 900
    aws = select(requirements_for(spec, get_backend("sagemaker").size_target(spec))).chosen
    assert aws is not None and aws.estimate is not None and aws.estimate.idle_s == 0


def test_a_short_job_and_a_long_job_of_the_same_network_rank_sizes_differently() -> None:
    """ResNet-50 on ImageNet over 8 GPUs on AWS: for 1 epoch the fixed parts (image pull, 138 GB download, upload)
    dominate and the cheapest size per hour wins; for 90 epochs (hours) the fastest per dollar wins."""

    def best(epochs: int):
        w = workload_for_model("resnet50", 1_281_167, epochs, 256, dataset_bytes=DATASET_BYTES["imagenet"])
        chosen = select(Requirements("aws", total_gpus=8, workload=w)).chosen
        assert chosen is not None and chosen.estimate is not None
        return chosen

    short, long_ = best(1), best(90)
    assert short.sku.size != long_.sku.size
    assert (short.sku.price_per_hour or 0) * short.nodes < (long_.sku.price_per_hour or 0) * long_.nodes
    assert long_.estimate.training_s > 3600 > short.estimate.training_s  # type: ignore[union-attr]
    assert short.estimate.startup_s > short.estimate.training_s  # type: ignore[union-attr]
