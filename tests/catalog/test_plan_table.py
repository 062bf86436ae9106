"""What `plan --explain` shows of each size: the real shape and price of a rejected one, a price read in another
region marked in its cell, and no retired size offered as fitting."""

from __future__ import annotations

import itertools

import pytest

from cloudddp.catalog import Requirements, find, select, skus
from tests.support.cli import ROOT, cli

CIFAR = ROOT / "jobs" / "cifar10-resnet18.yaml"  # 2 nodes × 8 GPUs


def row(table: str, size: str) -> str:
    """The first line of ``size``'s row in a rendered table."""
    return next(line for line in table.splitlines() if line.startswith(f"│ {size} "))


def test_a_rejected_size_shows_its_real_shape_its_price_with_its_kind_and_why() -> None:
    result = cli("plan", str(CIFAR), "-b", "sagemaker", "--explain")
    assert result.returncode == 0, result.stderr
    small = row(result.stdout, "ml.g5.xlarge")  # 1 A10G: the job needs 8 per node
    assert "2×1 A10G" in small and "$2.01*" in small, small  # two nodes of it, at EC2's price (a lower bound)
    assert "rejected 1 GPUs per node, the job needs 8" in small, small
    assert "0×" not in result.stdout and "$0.00*" not in result.stdout.split("cost of each part")[0]


def test_a_price_read_in_another_region_is_marked_in_the_table_not_only_under_it() -> None:
    away = cli("plan", str(CIFAR), "-b", "sagemaker", "-o", "sagemaker.region=eu-west-1")
    assert away.returncode == 0, away.stderr
    assert "~us-east-1" in row(away.stdout, "ml.g5.48xlarge"), away.stdout
    assert "no price for the size in eu-west-1: the price shown is REGION's" in away.stdout
    home = cli("plan", str(CIFAR), "-b", "sagemaker")  # the spec's region is us-east-1: prices read there
    assert "~" not in row(home.stdout, "ml.g5.48xlarge") and "~REGION" not in home.stdout, home.stdout
    azure = cli("plan", str(CIFAR), "-b", "azureml", "-o", "resources.nodes=1", "-o", "resources.gpus_per_node=1")
    assert "~southcentralus" in row(azure.stdout, "Standard_NC8ads_A10_v4"), azure.stdout  # eastus lists no A10 v4
    assert "~" not in row(azure.stdout, "Standard_NC4as_T4_v3"), azure.stdout


def test_p3dn_is_retired_with_a_dated_source_like_the_rest_of_p3() -> None:
    sku = find("ml.p3dn.24xlarge")
    assert sku is not None and sku.retired and sku.lifecycle_date == "2025-12-20"
    assert "December 20, 2025" in sku.lifecycle_source and "p3dn" in sku.lifecycle_source


@pytest.mark.parametrize("cloud", ["aws", "azure"])
def test_no_retired_size_is_ever_offered_as_fitting_whatever_the_shape(cloud: str) -> None:
    retired = {s.size for s in skus(cloud) if s.retired}
    assert retired, f"the {cloud} catalog has retired sizes to check"
    for nodes, per_node, interconnect in itertools.product((1, 2), (1, 2, 4, 8), ("auto", "any")):
        req = Requirements(cloud=cloud, nodes=nodes, gpus_per_node=per_node, interconnect=interconnect)
        offered = {c.sku.size for c in select(req).candidates if c.ok}
        assert not offered & retired, (nodes, per_node, offered & retired)
