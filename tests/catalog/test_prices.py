"""Every size the selection can choose has a dated price with a source named in SOURCES.md, and a 1-GPU Azure ML job
gets the cheapest size that fits (a T4 or an A10, not an A100)."""

from __future__ import annotations

from cloudddp.api import Job
from cloudddp.catalog.skus import all_skus
from tests.support.cli import FIXTURES, ROOT

UNPRICED = {
    "ml.p5e.48xlarge": "no on-demand price for p5e.48xlarge in Karpenter's us-east-1 table",
    "Standard_ND96isr_MI300X_v5": "in no region of Microsoft's Karpenter price table",
}
"""On-sale sizes without a dated price (the selection sets them aside, saying so)."""


def test_every_size_on_sale_has_a_dated_price_whose_source_is_named() -> None:
    sources = (ROOT / "cloudddp" / "data" / "SOURCES.md").read_text()
    unpriced = set()
    for sku in all_skus():
        if sku.lifecycle == "retired" or (not sku.cuda and sku.size not in UNPRICED):
            continue
        if sku.price_per_hour is None:
            unpriced.add(sku.size)
            continue
        assert sku.price_kind in ("list", "ec2-proxy") and sku.price_region, sku
        assert len(sku.price_date) == 10 and sku.price_date[:2] == "20", sku
        repo_path = sku.price_source.split(" ")[0]
        assert repo_path.split("/")[-1] in sources, (sku.size, sku.price_source)
    assert unpriced == set(UNPRICED), unpriced


def test_a_one_gpu_azure_ml_job_gets_a_t4_or_an_a10_with_a_dated_price() -> None:
    job = Job.load(
        FIXTURES / "ownscript" / "job.yaml",
        [
            "resources.gpus_per_node=1",
            "resources.nodes=1",
            "azureml.subscription_id=00000000-0000-0000-0000-000000000000",
            "azureml.resource_group=rg",
            "azureml.workspace=ws",
        ],
    )
    plan = job.render("azureml")
    assert plan.estimate is not None and plan.estimate.size is not None
    assert plan.estimate.size in ("Standard_NC4as_T4_v3", "Standard_NC8ads_A10_v4"), plan.estimate.size
    assert plan.estimate.price_per_hour is not None and plan.estimate.price_per_hour < 1.0
