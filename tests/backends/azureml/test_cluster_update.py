"""Waiting for a cluster update (cluster.py) where the service gives no operation URL: the cluster's own
``provisioningState`` is read until it ends. The client is a stub that answers as the pipeline would."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cloudddp.backends.azureml.cluster import _patch_and_wait
from cloudddp.errors import CloudDDPError

URL = "https://management.azure.com/subscriptions/s/resourceGroups/r/providers/Microsoft.MachineLearningServices/workspaces/w/computes/gpu?api-version=2024-04-01"


class Answer:
    def __init__(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        self.status_code, self.body, self.headers = status, body, headers or {}

    def raise_for_status(self) -> None:
        assert self.status_code < 400

    def text(self) -> str:
        return json.dumps(self.body)

    def json(self) -> dict[str, Any]:
        return self.body


class Client:
    """Answers the PATCH with ``first`` and each GET of the cluster with the next of ``states``."""

    def __init__(self, first: Answer, states: list[str]) -> None:
        self.first, self.states, self.sent = first, states, []

    def send_request(self, request: Any) -> Answer:
        self.sent.append((request.method, request.url))
        if request.method == "PATCH":
            return self.first
        return Answer(200, {"properties": {"provisioningState": self.states.pop(0)}})


def updating(state: str = "Updating") -> Answer:
    return Answer(200, {"properties": {"computeType": "AmlCompute", "provisioningState": state}})


def test_without_an_operation_url_the_clusters_state_is_read_until_succeeded() -> None:
    client, lines = Client(updating(), ["Updating", "Updating", "Succeeded"]), []
    _patch_and_wait(client, URL, {}, 0, 60, lines.append)
    assert [m for m, _ in client.sent] == ["PATCH", "GET", "GET", "GET"] and client.sent[1][1] == URL
    assert lines[:2] == ["growing cluster gpu: Updating (0 s)"] * 2 and lines[2].startswith("cluster gpu grown")


def test_an_update_already_done_is_not_polled_and_a_failed_one_is_an_error() -> None:
    done = Client(updating("Succeeded"), [])
    _patch_and_wait(done, URL, {}, 0, 60, print)
    assert [m for m, _ in done.sent] == ["PATCH"]
    with pytest.raises(CloudDDPError, match="growing cluster gpu ended Failed"):
        _patch_and_wait(Client(updating(), ["Failed"]), URL, {}, 0, 60, print)


class LocationClient(Client):
    """Answers the PATCH with 202 and a ``Location`` URL, then that URL with 202 ``waits`` times and 200 (ARM's
    Location pattern: no status in the body)."""

    def __init__(self, waits: int) -> None:
        super().__init__(Answer(202, {}, {"Location": URL.replace("/computes/gpu", "/operations/op1")}), [])
        self.waits = waits

    def send_request(self, request: Any) -> Answer:
        self.sent.append((request.method, request.url))
        if request.method == "PATCH":
            return self.first
        self.waits -= 1
        return Answer(202 if self.waits >= 0 else 200, {})


def test_a_location_only_update_ends_when_its_url_answers_200_not_after_the_timeout() -> None:
    client, lines = LocationClient(waits=2), []
    _patch_and_wait(client, URL, {}, 0, 60, lines.append)
    assert [m for m, _ in client.sent] == ["PATCH", "GET", "GET", "GET"] and "/operations/op1" in client.sent[1][1]
    assert lines[-1].startswith("cluster gpu grown"), lines


def test_a_failed_update_says_the_services_reason() -> None:
    failed = Client(updating(), [])
    failed.send_request = lambda request: (  # type: ignore[method-assign]
        failed.first
        if request.method == "PATCH"
        else Answer(
            200,
            {
                "properties": {
                    "provisioningState": "Failed",
                    "provisioningErrors": [{"error": {"code": "QuotaExceeded", "message": "no cores"}}],
                }
            },
        )
    )
    with pytest.raises(CloudDDPError, match="growing cluster gpu ended Failed: no cores"):
        _patch_and_wait(failed, URL, {}, 0, 60, print)
