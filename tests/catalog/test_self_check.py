"""The catalog checks itself (cloudddp/catalog/lint.py): facts, sources and dates on every row, families that
agree, and rows that do not contradict each other. Each rule is also shown to catch the error it is for."""

from __future__ import annotations

import dataclasses

from cloudddp.catalog import CATALOG_DATE, all_skus, find
from cloudddp.catalog.lint import (
    contradictions,
    family_problems,
    problems,
    row_problems,
)
from cloudddp.catalog.skus import Sku


def _row(size: str) -> Sku:
    sku = find(size)
    assert sku is not None, size
    return sku


def _with(size: str, **changes: object) -> list[Sku]:
    """The catalog with one row changed."""
    return [dataclasses.replace(s, **changes) if s.size == size else s for s in all_skus()]  # type: ignore[arg-type]


def test_the_shipped_catalog_has_no_problems() -> None:
    assert problems(all_skus()) == []
    assert len(all_skus()) >= 30


def test_every_priced_row_has_its_source_region_and_date_and_the_catalog_date_is_the_newest() -> None:
    priced = [s for s in all_skus() if s.price_per_hour is not None]
    assert priced and all(s.price_source and s.price_region and s.price_date for s in priced)
    assert max(s.price_date for s in priced) == CATALOG_DATE
    assert row_problems(dataclasses.replace(_row("ml.p4d.24xlarge"), price_date="")), "an undated price must fail"
    assert row_problems(dataclasses.replace(_row("ml.p4d.24xlarge"), price_source=""))
    assert row_problems(dataclasses.replace(_row("ml.p5e.48xlarge"), price_source="EC2"))  # a source without a price


def test_sizes_of_one_family_agree_on_gpu_model_link_and_fabric() -> None:
    assert family_problems(all_skus()) == []
    assert any("gpu_model" in p for p in family_problems(_with("ml.p3dn.24xlarge", family="p4d")))
    assert any("fabric" in p for p in family_problems(_with("ml.g5.12xlarge", family="g5")))  # EFA vs no EFA
    assert any("intra-node" in p for p in family_problems(_with("Standard_NC96ads_A100_v4", intranode="nvlink")))


def test_every_size_with_infiniband_or_efa_has_a_fabric_bandwidth() -> None:
    assert all(s.fabric_gbps for s in all_skus() if s.scales_multi_node)
    assert row_problems(dataclasses.replace(_row("Standard_ND96asr_v4"), fabric_gbps=None))


def test_rows_that_contradict_each_other_are_caught_as_p5e_was() -> None:
    """ml.p5e.48xlarge was listed with PCIe at 12 GB/s between its 8 H200s while p5en and ND H200 v5 have NVLink
    (370 GB/s): its efficiency read 28 % next to 94 % for p5en. The same-board rule catches that row."""
    assert contradictions(all_skus()) == []
    old_p5e = _with("ml.p5e.48xlarge", intranode="pcie", intranode_gb_s=12.0)
    assert any("8× H200 141GB" in p and "pcie" in p for p in contradictions(old_p5e))
    fast_v100 = _with("ml.p3dn.24xlarge", intranode_gb_s=900.0)  # same GPU on NVLink, 7× the bandwidth
    assert any("V100 on NVLink" in p for p in contradictions(fast_v100))
    assert p5e_like_its_siblings()


def p5e_like_its_siblings() -> bool:
    p5e, p5en = _row("ml.p5e.48xlarge"), _row("ml.p5en.48xlarge")
    return (p5e.intranode, p5e.intranode_gb_s, p5e.gpu_model) == (p5en.intranode, p5en.intranode_gb_s, p5en.gpu_model)


def test_lifecycles_are_dated_and_sourced() -> None:
    for s in all_skus():
        assert s.lifecycle_source, s.size
        assert bool(s.lifecycle_date) == (s.lifecycle != "on-sale"), s.size
    assert row_problems(dataclasses.replace(_row("Standard_NC6s_v3"), lifecycle_date=""))
    assert row_problems(dataclasses.replace(_row("Standard_NC6s_v3"), lifecycle_date="2027-01-01"))  # retired later?
    assert row_problems(dataclasses.replace(_row("ml.p4d.24xlarge"), lifecycle_source=""))
