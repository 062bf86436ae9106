"""The GPU catalog: InfiniBand/EFA-aware selection, sizes that exist (lifecycle), and the CLI views of it.

The catalog's self-check is in test_self_check.py; the scaling and cost model in test_cost_model.py.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cloudddp.backends.plugins import load_spec
from cloudddp.catalog import (
    CATALOG_DATE,
    Requirements,
    azure_ib_alternative,
    azure_rdma_by_name,
    disables_rdma,
    find,
    nccl_env_presets,
    replacement_for,
    select,
    skus,
    workload_for_model,
)
from cloudddp.errors import UserError
from cloudddp.runs.runner import get_backend
from tests.support.cli import FIXTURES, ROOT, cli

CIFAR = workload_for_model("resnet18", 50_000, 30, 256)
select_module = importlib.import_module("cloudddp.catalog.select")  # the module, not the function it exports


def test_two_single_gpu_a100_nodes_without_ib_warn_and_name_the_ib_alternative() -> None:
    sel = select(
        Requirements("azure", nodes=2, gpus_per_node=1, instance_type="Standard_NC24ads_A100_v4", workload=CIFAR)
    )
    named = sel.candidates[0]
    assert named.sku.size == "Standard_NC24ads_A100_v4"
    text = " ".join(named.warnings)
    assert "does not scale" in text and "Standard_ND96asr_v4" in text


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
    reason = g5.candidates[0].reasons[0]
    assert "smddp does not run on ml.g5.48xlarge" in reason and "ml.p4d.24xlarge" in reason
    assert "ml.p3.16xlarge" not in reason  # in the SDK's list, but retired


def test_a_single_node_job_is_not_forced_onto_infiniband() -> None:
    sel = select(Requirements("azure", nodes=1, gpus_per_node=1, accelerator="A100", workload=CIFAR))
    assert sel.chosen is not None and sel.chosen.sku.size == "Standard_NC24ads_A100_v4"
    assert not sel.chosen.sku.scales_multi_node


def test_every_rejected_candidate_keeps_a_reason() -> None:
    sel = select(Requirements("aws", total_gpus=16, accelerator="H100", spot=True, workload=CIFAR))
    for c in sel.candidates:
        assert c.reasons, c.sku.size
    assert all(not c.ok for c in sel.candidates if "H100" not in c.sku.gpu_model)


def test_ranking_is_by_cost_of_the_whole_job_and_unpriced_sizes_are_excluded_with_the_reason() -> None:
    sel = select(Requirements("azure", total_gpus=8, workload=CIFAR))
    ok = [c for c in sel.candidates if c.ok]
    costs = [c.estimate.total_cost for c in ok if c.estimate]
    assert ok and None not in costs and costs == sorted(costs) and sel.chosen is ok[0]  # type: ignore[type-var]
    unpriced = [c for c in sel.candidates if c.sku.price_per_hour is None and not c.sku.retired]
    assert unpriced, "the catalog has sizes without a price (e.g. Standard_ND96isr_H200_v5)"
    assert all(not c.ok and "no dated on-demand price" in " ".join(c.reasons) for c in unpriced)


def test_a_size_named_in_the_spec_without_a_price_is_kept_with_a_warning() -> None:
    sel = select(Requirements("aws", nodes=1, gpus_per_node=8, instance_type="ml.p5e.48xlarge"))
    assert sel.chosen is not None and sel.chosen.sku.size == "ml.p5e.48xlarge"
    assert any("no dated price" in w for w in sel.chosen.warnings), sel.chosen.warnings


def test_plan_on_azure_for_two_single_gpu_nodes_over_any_network_picks_the_cheapest_priced_size(tmp_path: Path) -> None:
    """2 nodes × 1 GPU with interconnect any: the choice is the lowest price among the sizes that fit (here the
    $0.53/h T4 size), and every size that fits has a dated price."""
    job = FIXTURES / "ownscript" / "job.yaml"
    args = ("-o", "resources.gpus_per_node=1", "-o", "resources.interconnect=any")
    result = cli("plan", str(job), "-b", "azureml", *args, "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["selection"]["candidates"]
    fitting = [r for r in rows if r["ok"]]
    assert fitting and all(r["price_per_hour"] is not None for r in fitting)
    cheapest = min(fitting, key=lambda r: r["price_per_hour"])
    assert fitting[0]["size"] == cheapest["size"] == "Standard_NC4as_T4_v3", fitting
    shown = cli("plan", str(job), "-b", "azureml", *args, cwd=tmp_path)
    assert "at most $25.25: limits.max_runtime 24.0 h at $1.05/h" in shown.stdout, shown.stdout
    assert "estimate step_s=" not in shown.stdout and "idle_s=" not in shown.stdout


@pytest.mark.parametrize("cloud", ["azure", "aws"])
def test_every_size_the_selection_can_choose_has_a_dated_sourced_price(cloud: str) -> None:
    """Any size that is on sale and comes out of ``select`` as ok, for any shape, carries a price with a source
    and a date."""
    for nodes, per_node in [(1, 1), (2, 1), (1, 2), (1, 4), (2, 8), (1, 8), (4, 8)]:
        sel = select(Requirements(cloud, nodes=nodes, gpus_per_node=per_node, interconnect="any"))
        for c in sel.candidates:
            if c.ok:
                sku = c.sku
                assert sku.price_per_hour and sku.price_source and sku.price_date, sku.size


def test_azure_rdma_rule_uses_the_catalog_first_then_the_r_in_the_name() -> None:
    assert azure_rdma_by_name("Standard_ND96isr_H100_v5")[0] is True
    assert azure_rdma_by_name("Standard_NC80adis_H100_v5")[0] is False  # 'i' not 'r': the catalog's exception
    assert azure_rdma_by_name("Standard_HB120rs_v3")[0] is True  # not in the catalog: the naming rule
    assert azure_rdma_by_name("Standard_D4s_v3")[0] is False


def test_presets_and_rdma_killers() -> None:
    azure_ib = nccl_env_presets(find("Standard_ND96asr_v4"))  # type: ignore[arg-type]
    assert azure_ib["NCCL_IB_PCI_RELAXED_ORDERING"] == "1"
    assert "NCCL_TOPO_FILE" not in azure_ib  # the topology file is on the host VM image, not in the job's container
    assert nccl_env_presets(find("ml.p4d.24xlarge"))["FI_PROVIDER"] == "efa"  # type: ignore[arg-type]
    assert nccl_env_presets(find("Standard_NC24ads_A100_v4")) == {}  # type: ignore[arg-type]
    assert disables_rdma({"NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket"}) and not disables_rdma({"NCCL_DEBUG": "INFO"})


# --- sizes that exist ---------------------------------------------------------------------------------


def test_ncv3_is_retired_on_2025_09_30_and_p3_on_2025_12_20() -> None:
    """Azure retired-sizes-list.md (azure-compute-docs @0bdc5d3): 'NCv3-Series Retired 30/9/25', 'NCv3-NC24rs Series
    Retired 30/9/25'. AWS notice quoted in zalando-incubator/kubernetes-on-aws#8685 (2024-12-23): migrate off P3 'by
    December 20, 2025'."""
    for size in ("Standard_NC6s_v3", "Standard_NC12s_v3", "Standard_NC24s_v3", "Standard_NC24rs_v3"):
        sku = find(size)
        assert sku is not None and sku.retired and sku.lifecycle_date == "2025-09-30", size
    for size in ("ml.p3.2xlarge", "ml.p3.8xlarge", "ml.p3.16xlarge"):
        sku = find(size)
        assert sku is not None and sku.retired and sku.lifecycle_date == "2025-12-20", size
    on_sale = [s for s in skus("azure") + skus("aws") if not s.retired]
    assert on_sale and all(s.lifecycle_source.startswith("on sale as of 2026-11-09") for s in on_sale)


@settings(max_examples=200, deadline=None)
@given(
    cloud=st.sampled_from(["azure", "aws"]),
    total=st.sampled_from([1, 2, 4, 8, 16, 32]),
    gpu=st.sampled_from([None, "A100", "V100", "H100", "T4"]),
    mem=st.sampled_from([None, 16, 40, 80]),
    spot=st.booleans(),
)
def test_the_chosen_size_always_meets_the_requirements_and_is_on_sale(
    cloud: str, total: int, gpu: str | None, mem: int | None, spot: bool
) -> None:
    sel = select(
        Requirements(cloud, total_gpus=total, accelerator=gpu, min_gpu_memory_gb=mem, spot=spot, workload=CIFAR)
    )
    c = sel.chosen
    assert all(not x.ok for x in sel.candidates if x.sku.retired)
    if c is None:
        assert all(not x.ok for x in sel.candidates)
        return
    assert c.nodes * c.gpus_per_node == total
    assert gpu is None or gpu in c.sku.gpu_model
    assert mem is None or c.sku.gpu_mem_gb >= mem
    assert c.nodes == 1 or c.sku.scales_multi_node
    assert not spot or c.sku.spot
    assert not c.sku.retired


def test_a_retired_size_is_rejected_with_its_date_and_source_even_when_named() -> None:
    sel = select(Requirements("azure", nodes=2, gpus_per_node=4, instance_type="Standard_NC24rs_v3", workload=CIFAR))
    named = sel.candidates[0]
    assert sel.chosen is None and not named.ok
    assert "retired on 2025-09-30" in named.reasons[0] and "retired-sizes-list.md" in named.reasons[0]
    assert azure_ib_alternative("Standard_NC24s_v3") is None  # its RDMA sibling is retired too


def test_a_size_retiring_within_90_days_is_picked_only_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """No catalog row retires within 90 days of the catalog date, so the rule is exercised on a copy of the rows."""
    rows = skus("azure")
    soon = {"Standard_ND96asr_v4": ("retiring", "2026-12-01"), "Standard_ND96isr_H100_v5": ("retiring", "2027-06-30")}
    patched = [
        dataclasses.replace(s, lifecycle=soon[s.size][0], lifecycle_date=soon[s.size][1]) if s.size in soon else s
        for s in rows
    ]
    monkeypatch.setattr(select_module, "skus", lambda cloud: patched)
    sel = select(Requirements("azure", total_gpus=16, accelerator="A100", workload=CIFAR))
    assert sel.chosen is not None
    by_size = {c.sku.size: c for c in sel.candidates}
    asr = by_size["Standard_ND96asr_v4"]
    assert asr.ok and any("retires on 2026-12-01, 22 days after the catalog date 2026-11-09" in w for w in asr.warnings)
    far = select(Requirements("azure", total_gpus=16, accelerator="H100", workload=CIFAR)).candidates
    h100 = next(c for c in far if c.sku.size == "Standard_ND96isr_H100_v5")
    assert h100.ok and not any("retires" in w for w in h100.warnings)


def test_the_nearest_current_replacement_keeps_the_gpu_count_and_fabric_class_with_the_newest_gpu() -> None:
    repl = replacement_for(find("ml.p3.16xlarge"))  # type: ignore[arg-type]
    assert repl is not None and repl.gpus == 8 and not repl.retired and repl.gpu == "H200"
    nc24rs = replacement_for(find("Standard_NC24rs_v3"))  # type: ignore[arg-type]
    # no current 4-GPU InfiniBand size on Azure: the nearest count that keeps InfiniBand
    assert nc24rs is not None and nc24rs.scales_multi_node and nc24rs.gpus == 8 and not nc24rs.retired
    nc6s = replacement_for(find("Standard_NC6s_v3"))  # type: ignore[arg-type]
    assert nc6s is not None and nc6s.gpus == 1 and nc6s.gpu == "H100"


@pytest.mark.parametrize(
    ("override", "backend", "field", "replacement"),
    [
        ("azureml.vm_size=Standard_NC24rs_v3", "azureml", "azureml.vm_size", "Standard_ND96isr_H200_v5"),
        ("sagemaker.instance_type=ml.p3.16xlarge", "sagemaker", "sagemaker.instance_type", "ml.p5en.48xlarge"),
    ],
)
def test_naming_a_retired_size_is_a_user_error_naming_the_replacement(
    override: str, backend: str, field: str, replacement: str
) -> None:
    spec = load_spec(ROOT / "jobs" / "cifar10-resnet18.yaml", [override])
    named = override.split("=", 1)[1]
    with pytest.raises(UserError) as info:
        get_backend(backend).render(spec)
    text = str(info.value)
    assert text.startswith(f"{field}: {named} was retired on") and f"nearest current replacement: {replacement}" in text


def test_the_cloud_is_a_plain_string_checked_against_the_catalog() -> None:
    with pytest.raises(UserError, match=r"cloud 'gcp' has no sizes in the GPU catalog \(clouds: aws, azure\)"):
        select(Requirements("gcp", total_gpus=8))


# --- the CLI views ------------------------------------------------------------------------------------


def test_skus_command_prints_a_table_and_json() -> None:
    table = cli("skus", "--cloud", "azure", "--gpus", "16", "--gpu", "A100")
    assert table.returncode == 0 and "Standard_ND96asr_v4" in table.stdout and "chosen" in table.stdout
    assert "Standard_NC24rs_v3" not in table.stdout  # retired: only listed under --explain
    data = json.loads(cli("skus", "--cloud", "aws", "--gpus", "16", "--smddp", "--json").stdout)
    assert data["chosen"]["size"] in ("ml.p4d.24xlarge", "ml.p4de.24xlarge") and data["catalog_date"] == CATALOG_DATE
    assert set(data["chosen"]["breakdown"]) == {"startup", "training", "checkpoint", "shutdown", "idle"}
    p3 = next(c for c in data["candidates"] if c["size"] == "ml.p3.16xlarge")
    assert not p3["ok"] and "retired on 2025-12-20" in p3["why"] and p3["lifecycle"] == "retired on 2025-12-20"
    assert cli("skus", "--cloud", "gcp").returncode == 2


def _parts_table(stdout: str) -> dict[str, list[str]]:
    """The cells of the per-part cost table that --explain prints after the verdicts, by size."""
    table = stdout.split("cost of each part")[1]
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in table.splitlines() if line.startswith("│ ")]
    return {cells[0]: cells[1:] for cells in rows if cells and cells[0]}


def test_skus_explain_lists_retired_sizes_as_rejected_with_the_cost_breakdown_of_the_others() -> None:
    shown = cli("skus", "--cloud", "aws", "--gpus", "8", "--explain")
    assert shown.returncode == 0
    verdicts = [line for line in shown.stdout.split("cost of each part")[0].splitlines() if "ml.p3.16xlarge" in line]
    assert verdicts and "rejected retired on 2025-12-20" in verdicts[0]
    parts = _parts_table(shown.stdout)
    assert parts["ml.p3.16xlarge"][0] == "retired on 2025-12-20"
    chosen = parts[next(line.split("│")[1].strip() for line in shown.stdout.splitlines() if "chosen" in line)]
    assert chosen[0] == "on sale as of 2026-11-09" and all(cell.startswith("$") for cell in chosen[1:])
    plain = cli("skus", "--cloud", "aws", "--gpus", "8").stdout
    assert "ml.p3.16xlarge" not in plain and "cost of each part" not in plain


def test_plan_explain_shows_the_breakdown_per_size_and_the_retired_ones() -> None:
    job = str(ROOT / "jobs" / "cifar10-azureml.yaml")
    shown = cli("plan", job, "-b", "azureml", "--explain")
    assert shown.returncode == 0, shown.stderr
    parts = _parts_table(shown.stdout)
    startup, *_, idle, total = parts["Standard_ND96asr_v4"][1:]
    assert idle.endswith(" 5m") and startup.startswith("$") and total.startswith("$")  # 300 s idle: the spec default
    assert parts["Standard_NC24rs_v3"][0] == "retired on 2025-09-30"
    data = json.loads(cli("plan", job, "-b", "azureml", "--json").stdout)["selection"]
    best = data["chosen"]
    assert best["size"] == "Standard_ND96asr_v4" and best["breakdown"]["idle"]["s"] == 300
    summed = sum(p["cost"] for p in best["breakdown"].values())
    assert abs(summed - best["total_cost"]) / best["total_cost"] < 0.01
    nc24rs = next(c for c in data["candidates"] if c["size"] == "Standard_NC24rs_v3")
    assert not nc24rs["ok"] and "retired on 2025-09-30" in nc24rs["why"]


def test_the_accelerator_asked_for_matches_whole_words_so_an_a10_is_not_an_a100() -> None:
    from cloudddp.catalog import find
    from cloudddp.catalog.select import gpu_matches

    a100, a10 = find("Standard_NC24ads_A100_v4"), find("Standard_NC8ads_A10_v4")
    assert a100 is not None and a10 is not None
    assert gpu_matches("A100", a100) and gpu_matches("a100 80gb", a100) and not gpu_matches("A10", a100)
    assert gpu_matches("A10", a10) and not gpu_matches("A100", a10)
