"""The preflight's quota check: every page of Service Quotas, the spot quota for spot jobs, failures warned."""

from __future__ import annotations

from typing import Any

from cloudddp.backends.sagemaker.quotas import quota_check


class Quotas:
    """A service-quotas client stub: ``list_service_quotas`` in pages, as botocore's paginator yields them."""

    def __init__(self, pages: list[list[dict[str, Any]]], fail: Exception | None = None) -> None:
        self.pages, self.fail = pages, fail
        self.asked: list[dict[str, Any]] = []

    def get_paginator(self, operation: str) -> Quotas:
        assert operation == "list_service_quotas"
        return self

    def paginate(self, **params: Any) -> Any:
        self.asked.append(params)
        if self.fail:
            raise self.fail
        return iter({"Quotas": page} for page in self.pages)


def quota(name: str, value: float) -> dict[str, Any]:
    return {"QuotaName": name, "Value": value}


PAGES = [
    [quota(f"ml.m5.{i}xlarge for training job usage", 4) for i in range(100)],
    [quota("ml.p4d.24xlarge for training job usage", 1), quota("ml.p4d.24xlarge for spot training job usage", 4)],
]


def test_the_quota_on_a_later_page_is_found() -> None:
    client = Quotas(PAGES)
    check = quota_check(client, "ml.p4d.24xlarge", 2, spot=False)
    assert check.ok is False and "1 allowed, the job needs 2" in check.detail
    assert client.asked == [{"ServiceCode": "sagemaker"}]


def test_a_spot_job_is_checked_against_the_spot_quota() -> None:
    check = quota_check(Quotas(PAGES), "ml.p4d.24xlarge", 2, spot=True)
    assert check.ok is True and "spot training job usage" in check.name and "4 allowed" in check.detail


def test_a_failed_lookup_is_a_warning_not_silence() -> None:
    denied = Quotas([], fail=RuntimeError("AccessDenied: no servicequotas:ListServiceQuotas"))
    check = quota_check(denied, "ml.g5.xlarge", 1, spot=False)
    assert check.ok is None and check.detail.startswith("warning: could not read Service Quotas: AccessDenied")
    missing = quota_check(Quotas(PAGES), "ml.g5.xlarge", 1, spot=False)
    assert missing.ok is None and "warning: no such quota" in missing.detail
