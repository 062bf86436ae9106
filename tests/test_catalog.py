"""The GPU catalog, InfiniBand/EFA-aware selection, and the cost and scaling model."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from cloudddp.catalog import (
    Requirements, all_skus, azure_ib_alternative, azure_rdma_by_name, disables_rdma, find, nccl_env_presets,
    select, workload_for_model,
)
from cloudddp.catalog.model import estimate

from .support.cli import cli

CIFAR = workload_for_model("resnet18", 50_000, 30, 256)


def test_every_row_has_its_facts_and_a_dated_source() -> None:
    rows = all_skus()
    assert len(rows) >= 30
    for s in rows:
        assert s.gpus > 0 and s.gpu_mem_gb > 0 and s.vcpus > 0 and s.ram_gb > 0, s
        assert s.fabric in ("infiniband", "efa", "ethernet"), s
        if s.scales_multi_node:
            assert s.fabric_gbps and s.fabric_gbps > 0, s.size
        if s.price_per_hour is not None:
            assert s.price_per_hour > 0 and s.price_source and s.price_region, s


def test_seed_azure_two_single_gpu_v100_nodes_without_ib_warn_and_name_the_ib_alternative() -> None:
    sel = select(Requirements("azure", nodes=2, gpus_per_node=1, instance_type="Standard_NC6s_v3", workload=CIFAR))
    named = sel.candidates[0]
    assert named.sku.size == "Standard_NC6s_v3"
    text = " ".join(named.warnings)
    assert "does not scale" in text and "Standard_NC24rs_v3" in text


def test_named_nc24s_v3_for_two_nodes_warns_and_names_nc24rs_v3() -> None:
    sel = select(Requirements("azure", nodes=2, gpus_per_node=4, instance_type="Standard_NC24s_v3"))
    assert "Standard_NC24rs_v3" in " ".join(sel.candidates[0].warnings)
    assert azure_ib_alternative("Standard_NC24s_v3") == "Standard_NC24rs_v3"


def test_sixteen_a100_on_azure_pick_an_nd_a100_v4_size() -> None:
    sel = select(Requirements("azure", total_gpus=16, accelerator="A100", workload=CIFAR))
    assert sel.chosen is not None
    assert sel.chosen.sku.size in ("Standard_ND96asr_v4", "Standard_ND96amsr_A100_v4")
    assert sel.chosen.nodes == 2 and sel.chosen.sku.scales_multi_node


def test_smddp_on_aws_picks_a_supported_size_and_rejects_g5_naming_the_alternatives() -> None:
    sel = select(Requirements("aws", nodes=2, gpus_per_node=8, smddp=True, workload=CIFAR))
    assert sel.chosen is not None and sel.chosen.sku.size in ("ml.p4d.24xlarge", "ml.p4de.24xlarge")
    g5 = select(Requirements("aws", nodes=2, gpus_per_node=8, smddp=True, instance_type="ml.g5.48xlarge"))
    assert g5.chosen is None
    assert "smddp does not run on ml.g5.48xlarge" in g5.candidates[0].reasons[0]
    assert "ml.p4d.24xlarge" in g5.candidates[0].reasons[0]


def test_a_single_node_job_is_not_forced_onto_infiniband() -> None:
    sel = select(Requirements("azure", nodes=1, gpus_per_node=1, accelerator="A100", workload=CIFAR))
    assert sel.chosen is not None and sel.chosen.sku.size == "Standard_NC24ads_A100_v4"
    assert not sel.chosen.sku.scales_multi_node


def test_every_rejected_candidate_keeps_a_reason() -> None:
    sel = select(Requirements("aws", total_gpus=16, accelerator="H100", spot=True, workload=CIFAR))
    for c in sel.candidates:
        assert c.reasons, c.sku.size
    assert all(not c.ok for c in sel.candidates if "H100" not in c.sku.gpu_model)


def test_ranking_is_by_cost_of_the_whole_job_not_price_per_hour() -> None:
    sel = select(Requirements("azure", total_gpus=8, workload=CIFAR))
    ok = [c for c in sel.candidates if c.ok and c.estimate and c.estimate.total_cost is not None]
    costs = [c.estimate.total_cost for c in ok]  # type: ignore[union-attr]
    assert costs == sorted(costs)
    assert sel.chosen is ok[0]


def test_published_ddp_benchmark_resnet50_16_v100_over_100gb_ib_is_about_93_percent() -> None:
    """pytorch/benchmarks distributed/ddp README: ResNet-50, fp32, 16 V100 (4 nodes × 4 NVLink GPUs),
    100 Gb/s InfiniBand, ~93 % scaling efficiency. fp32 V100 peak: 15.7 TFLOPS (NVIDIA datasheet)."""
    w = workload_for_model("resnet50", 1_281_167, 1, 32)
    e = estimate(w, gpus_per_node=4, nodes=4, peak=15.7, intranode_gb_s=130, fabric="infiniband",  # type: ignore[arg-type]
                 fabric_gbps=100, price_per_node_hour=None)
    assert abs(e.efficiency - 0.93) / 0.93 < 0.10, e.efficiency


def test_published_goyal_2017_resnet50_256_p100_over_50gb_ethernet_is_about_90_percent() -> None:
    """Goyal et al. 2017, "Accurate, Large Minibatch SGD" (arXiv:1706.02677): ResNet-50, 256 P100 in 32
    Big Basin servers (8 NVLink GPUs each), 50 Gb Ethernet, ~90 % scaling efficiency from 8 to 256 GPUs.
    P100 fp32 peak 10.6 TFLOPS; NVLink bus bandwidth ~80 GB/s."""
    w = workload_for_model("resnet50", 1_281_167, 1, 32)
    e = estimate(w, gpus_per_node=8, nodes=32, peak=10.6, intranode_gb_s=80, fabric="ethernet",  # type: ignore[arg-type]
                 fabric_gbps=50, price_per_node_hour=None)
    assert abs(e.efficiency - 0.90) / 0.90 < 0.10, e.efficiency


def test_multi_node_over_ethernet_predicts_poor_scaling_and_one_node_needs_no_fabric() -> None:
    w = workload_for_model("resnet18", 50_000, 1, 256)
    slow = estimate(w, gpus_per_node=1, nodes=8, peak=312, intranode_gb_s=0, fabric="ethernet", fabric_gbps=20,  # type: ignore[arg-type]
                    price_per_node_hour=1.0)
    fast = estimate(w, gpus_per_node=8, nodes=1, peak=312, intranode_gb_s=230, fabric="ethernet", fabric_gbps=None,  # type: ignore[arg-type]
                    price_per_node_hour=1.0)
    assert slow.efficiency < 0.5 < fast.efficiency
    assert fast.exposed_comm_s < slow.exposed_comm_s


def test_azure_rdma_rule_uses_the_catalog_first_then_the_r_in_the_name() -> None:
    assert azure_rdma_by_name("Standard_ND96isr_H100_v5")[0] is True
    assert azure_rdma_by_name("Standard_NC80adis_H100_v5")[0] is False  # 'i' not 'r': the catalog's exception
    assert azure_rdma_by_name("Standard_HB120rs_v3")[0] is True  # not in the catalog: the naming rule
    assert azure_rdma_by_name("Standard_D4s_v3")[0] is False


def test_presets_and_rdma_killers() -> None:
    assert nccl_env_presets(find("Standard_ND96asr_v4"))["NCCL_TOPO_FILE"].endswith("ndv4-topo.xml")  # type: ignore[arg-type]
    assert nccl_env_presets(find("ml.p4d.24xlarge"))["FI_PROVIDER"] == "efa"  # type: ignore[arg-type]
    assert nccl_env_presets(find("Standard_NC6s_v3")) == {}  # type: ignore[arg-type]
    assert disables_rdma({"NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket"}) and not disables_rdma({"NCCL_DEBUG": "INFO"})


@settings(max_examples=200, deadline=None)
@given(
    cloud=st.sampled_from(["azure", "aws"]),
    total=st.sampled_from([1, 2, 4, 8, 16, 32]),
    gpu=st.sampled_from([None, "A100", "V100", "H100", "T4"]),
    mem=st.sampled_from([None, 16, 40, 80]),
    spot=st.booleans(),
)
def test_the_chosen_size_always_meets_the_requirements(cloud: str, total: int, gpu: str | None, mem: int | None, spot: bool) -> None:
    sel = select(Requirements(cloud, total_gpus=total, accelerator=gpu, min_gpu_memory_gb=mem, spot=spot, workload=CIFAR))  # type: ignore[arg-type]
    c = sel.chosen
    if c is None:
        assert all(not x.ok for x in sel.candidates)
        return
    assert c.nodes * c.gpus_per_node == total
    assert gpu is None or gpu in c.sku.gpu_model
    assert mem is None or c.sku.gpu_mem_gb >= mem
    assert c.nodes == 1 or c.sku.scales_multi_node
    assert not spot or c.sku.spot


def test_skus_command_prints_a_table_and_json() -> None:
    table = cli("skus", "--cloud", "azure", "--gpus", "16", "--gpu", "A100")
    assert table.returncode == 0 and "Standard_ND96asr_v4" in table.stdout and "chosen" in table.stdout
    data = json.loads(cli("skus", "--cloud", "aws", "--gpus", "16", "--smddp", "--json").stdout)
    assert data["chosen"]["size"] in ("ml.p4d.24xlarge", "ml.p4de.24xlarge") and data["catalog_date"]
    assert cli("skus", "--cloud", "gcp").returncode == 2
