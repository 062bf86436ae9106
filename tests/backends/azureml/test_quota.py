"""Quota as Azure ML counts it (quota.py), on the rows of the REST spec's ``Usage/list.json`` example."""

from __future__ import annotations

from cloudddp.backends.azureml.quota import Usage, family_core, quota_checks
from tests.support.azure_rig import rest_example


def example_rows() -> list[Usage]:
    rows = rest_example("usage_list")["body"]["value"]
    return [Usage(r["name"]["value"], r["type"], r["id"], r["currentValue"], r["limit"]) for r in rows]


def test_family_names_in_both_forms_reduce_to_the_same_core() -> None:
    assert family_core("standardDSv2Family") == family_core("Standard DSv2 ") == "dsv2"
    assert family_core("standardNDASv4_A100Family") == "ndasv4a100"


def test_dedicated_counts_the_familys_long_named_row_and_the_regional_total() -> None:
    checks = {c.name: c for c in quota_checks(example_rows(), "standardDSv2Family", 2, 4, spot=False)}
    family = checks["quota for standardDSv2Family"]  # 24 - 2 = 22 free (the subscription row, not a workspace's)
    assert family.ok and "Standard DSv2 Family Cluster Dedicated vCPUs: 22 vCPUs free" in family.detail
    regional = checks["dedicated quota (regional)"]  # 24 - 14 = 10 free, 8 needed
    assert regional.ok and "10 vCPUs free" in regional.detail
    over = {c.name: c for c in quota_checks(example_rows(), "standardDSv2Family", 2, 6, spot=False)}
    assert over["dedicated quota (regional)"].ok is False and over["quota for standardDSv2Family"].ok


def test_spot_counts_the_regional_low_priority_pool_not_a_zero_dedicated_family() -> None:
    checks = quota_checks(example_rows(), "standardNCSv3Family", 6, 4, spot=True)  # NCv3: 0 dedicated cores
    assert [(c.name, c.ok) for c in checks] == [("low-priority quota (regional)", True)]
    assert "32 vCPUs free (18 of 50 used), the job needs 24" in checks[0].detail
    over = quota_checks(example_rows(), "standardNCSv3Family", 6, 6, spot=True)
    assert over[0].ok is False and "Total Cluster LowPriority Regional vCPUs" in over[0].detail and over[0].fix


def test_a_lookup_that_matches_nothing_is_a_named_unchecked_quota_never_a_pass() -> None:
    (check, *_) = quota_checks(example_rows(), "standardNDASv4_A100Family", 96, 2, spot=False)
    assert check.ok is None
    assert "'Standard NDASv4_A100 Family Cluster Dedicated vCPUs' (or 'standardNDASv4_A100Family')" in check.detail
    no_regional = [r for r in example_rows() if "LowPriority Regional" not in r.name]
    (spot,) = quota_checks(no_regional, "standardDSv2Family", 2, 1, spot=True)[:1]
    assert spot.ok is None and "Total Cluster LowPriority Regional vCPUs" in spot.detail


def test_the_workspaces_own_row_counts_where_it_leaves_less_than_the_subscriptions() -> None:
    """The example's demo_workspace1 row for DSv2 repeats the subscription's (24): no second check. Given 4 of its
    own, a job of 8 vCPUs is refused by it though the subscription has 22 free; another workspace's row is not
    this workspace's."""
    same = quota_checks(example_rows(), "standardDSv2Family", 2, 4, spot=False, workspace="demo_workspace1")
    assert [c.name for c in same] == ["quota for standardDSv2Family", "dedicated quota (regional)"]
    rows = [
        Usage(u.name, u.type, u.id, u.current, 4 if "/workspaces/demo_workspace1/" in u.id else u.limit)
        for u in example_rows()
    ]
    checks = {
        c.name: c for c in quota_checks(rows, "standardDSv2Family", 2, 4, spot=False, workspace="demo_workspace1")
    }
    own = checks["workspace demo_workspace1's quota for standardDSv2Family"]
    assert own.ok is False and "2 vCPUs free (2 of 4 used), the job needs 8" in own.detail
    assert checks["quota for standardDSv2Family"].ok
    other = quota_checks(rows, "standardDSv2Family", 2, 4, spot=False, workspace="another")
    assert all(c.ok for c in other), other
