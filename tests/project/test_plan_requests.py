"""A plan's request typed by its backend (``cloudddp.plan``): a backend's own request shape is a JsonDataclass that
the binding step fills field by field, that prints as the same JSON as a dict would, and that a saved plan reads
back as the same typed object (what recovery relaunches); a misspelt key in stored data is an error, not data."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from pydantic import ValidationError

from cloudddp.api import Job
from cloudddp.plan import JsonDataclass, Plan, late, substitute
from cloudddp.runs.runner import get_backend
from tests.support.harnesses import TINY


@dataclass(frozen=True)
class Node(JsonDataclass):
    argv: tuple[str, ...]
    env: dict[str, str]


@dataclass(frozen=True)
class Request(JsonDataclass):
    cwd: str
    nodes: tuple[Node, ...]
    port: str | None = None


RUN_DIR, PORT = late("RUN_DIR"), late("PORT")
REQUEST = Request(f"{RUN_DIR}/code", (Node(("python", f"{RUN_DIR}/x"), {"DIR": RUN_DIR}),), PORT)


def plan() -> Plan[Request]:
    return Plan("toy", "job", REQUEST, documents={"run.sh": f"cd {RUN_DIR}"}, late=("RUN_DIR", "PORT"))


def test_binding_fills_every_field_of_a_typed_request_and_keeps_its_type() -> None:
    bound = plan().bind({"RUN_DIR": "/runs/1", "PORT": "2900"})
    assert bound.request == Request("/runs/1/code", (Node(("python", "/runs/1/x"), {"DIR": "/runs/1"}),), "2900")
    assert bound.documents == {"run.sh": "cd /runs/1"} and bound.late == ()
    assert substitute(REQUEST, {}) == REQUEST


def test_a_typed_request_prints_as_json_data_and_a_saved_plan_reads_it_back_typed() -> None:
    data = plan().to_dict()["request"]
    node = {"argv": ["python", "{RUN_DIR}/x"], "env": {"DIR": "{RUN_DIR}"}}
    assert data == {"cwd": "{RUN_DIR}/code", "nodes": [node], "port": "{PORT}"}
    restored = Plan.from_state(plan().to_state(), request_type=Request)
    assert restored.request == REQUEST and isinstance(restored.request.nodes[0], Node)
    assert Plan.from_state(plan().to_state()).request == data  # no type given: the data as it was stored


def test_a_key_the_type_does_not_have_is_refused_and_a_record_with_other_keys_reads_its_own() -> None:
    data = REQUEST.to_dict()
    with pytest.raises(ValidationError, match="cwdd"):
        Request.from_dict({**data, "cwdd": "/x"})
    with pytest.raises(ValidationError, match=r"nodes\.0\.envv"):
        Request.from_dict({**data, "nodes": [{"argv": [], "envv": {}}]})
    info = {"cwd": "/c", "nodes": [], "metrics": [{"name": "loss"}], "step_key": "k"}  # as a run record holds it
    assert Request.from_fields(info) == Request("/c", ())  # its own fields; port, absent, keeps its default


@pytest.mark.parametrize("name", ["local", "slurm"])
def test_a_saved_local_or_slurm_plan_comes_back_with_its_typed_request(name: str) -> None:
    backend = get_backend(name)
    plan = backend.render(Job.load(TINY).spec)
    assert backend.request_type is not None and isinstance(plan.request, backend.request_type)
    restored = backend.restore(plan.to_state())  # what recovery relaunches
    assert isinstance(restored.request, backend.request_type) and restored.request == plan.request
    assert restored.to_dict() == plan.to_dict()
