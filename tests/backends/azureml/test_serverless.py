"""Serverless compute, Azure ML's recommended way to run a job, is the default when the spec names no cluster:
the job names its size (``resources.instance_type``), its node count and its tier (``queue_settings.job_tier``),
and nothing is created. What the rendered YAML becomes through azure-ai-ml's own ``load_job`` is compared with
what azure-ai-ml's ``command()`` sends for the same job; the rig checks what it receives."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from cloudddp.backends.azureml import AzureMLBackend
from cloudddp.backends.azureml.decide import auto_cluster_name
from cloudddp.backends.azureml.limits import valid_cluster_name
from cloudddp.backends.checks import PreflightFailed
from cloudddp.backends.plugins import load_spec, spec_from_dict
from cloudddp.backends.status import RunState
from cloudddp.errors import UserError
from cloudddp.plan import Plan
from tests.support.azure_launchers import Datastores
from tests.support.azure_nodes import AzureNodes
from tests.support.azure_rig import WorkspaceModel
from tests.support.azure_rig import rig_backend as backend
from tests.support.cli import ROOT, cli

AZURE_JOB = ROOT / "jobs" / "cifar10-azureml.yaml"


def render(*overrides: str) -> Plan:
    return AzureMLBackend(token="s").render(load_spec(AZURE_JOB, list(overrides)))


def rest_properties(job: Any) -> dict[str, Any]:
    """The REST body's properties of a command job (a ``Command`` builder is made a ``CommandJob`` first, as
    ``jobs.create_or_update`` does)."""
    job = job._to_job() if hasattr(job, "_to_job") else job
    rest: dict[str, Any] = job._to_rest_object().as_dict()["properties"]
    return rest


def test_a_job_without_a_cluster_renders_as_serverless_and_loads_as_command_sends_it(tmp_path: Path) -> None:
    from azure.ai.ml import Input, Output, PyTorchDistribution, command, load_job
    from azure.ai.ml.entities import QueueSettings

    plan = render("azureml.compute=null")
    assert plan.request["compute"] is None and "compute.yml" not in plan.documents
    (tmp_path / "job.yml").write_text(plan.documents["job.yml"])
    loaded = rest_properties(load_job(tmp_path / "job.yml"))
    doc = plan.request["job"]
    sent = rest_properties(
        command(
            command=doc["command"],
            code=doc["code"],
            environment=doc["environment"],
            instance_type="Standard_ND96asr_v4",
            instance_count=2,
            shm_size=doc["resources"]["shm_size"],
            queue_settings=QueueSettings(job_tier="standard"),
            distribution=PyTorchDistribution(process_count_per_instance=8),
            environment_variables=doc["environment_variables"],
            inputs={k: Input(**v) for k, v in doc["inputs"].items()},
            outputs={k: Output(**v) for k, v in doc["outputs"].items()},
            timeout=doc["limits"]["timeout"],
        )
    )
    for key in ("computeId", "resources", "queueSettings", "distribution", "environmentVariables", "command", "inputs"):
        assert loaded.get(key) == sent.get(key), key
    assert loaded.get("computeId") is None
    assert loaded["resources"] == {
        "instanceCount": 2,
        "instanceType": "Standard_ND96asr_v4",
        "properties": {},
        "shmSize": doc["resources"]["shm_size"],
    }
    assert loaded["queueSettings"] == {"jobTier": "Standard"}
    said = " ".join(plan.decisions)
    assert "serverless compute (no azureml.compute)" in said and "no computes/write" in said
    # Nodes released when the job ends: no scale-down delay in the estimate, as a cluster's 300 s would be.
    assert plan.estimate is not None and plan.estimate.idle_s == 0
    assert render().estimate.idle_s == 300  # type: ignore[index]
    # The seed job's cluster settings do nothing without a cluster: said, not dropped in silence.
    assert any("azureml.max_nodes, azureml.min_nodes" in w and "serverless" in w for w in plan.warnings)


def test_the_job_tier_follows_resources_spot_and_may_not_contradict_it() -> None:
    assert render("azureml.compute=null", "resources.spot=true").request["job"]["queue_settings"] == {
        "job_tier": "spot"
    }
    standard = render("azureml.compute=null", "azureml.job_tier=standard").request["job"]
    assert standard["queue_settings"] == {"job_tier": "standard"}
    for overrides, says in (
        (["azureml.compute=null", "azureml.job_tier=spot"], "azureml.job_tier: spot contradicts resources.spot: false"),
        (["azureml.job_tier=spot"], "applies to serverless compute only"),
        (["azureml.compute=null", "azureml.job_tier=basic"], "azureml.job_tier: Input should be 'spot' or 'standard'"),
        (["azureml.compute=null", "azureml.job_tier=premium"], "(got 'premium')"),
    ):
        result = cli("render", str(AZURE_JOB), "-b", "azureml", *[a for o in overrides for a in ("-o", o)])
        assert result.returncode == 2 and says in result.stderr, result.stderr


def test_auto_clusters_are_named_per_workspace_size_and_tier_and_next_size_refuses_a_hand_named_cluster() -> None:
    """Azure ML wants a compute name unique across all computes of its region: another workspace, another name."""
    workspaces = [
        {"subscription_id": "00000000-0000-0000-0000-000000000000", "resource_group": "ml-rg", "name": "ml-workspace"},
        {"subscription_id": "00000000-0000-0000-0000-000000000000", "resource_group": "ml-rg", "name": "other"},
        {"subscription_id": "11111111-1111-1111-1111-111111111111", "resource_group": "ml-rg", "name": "ml-workspace"},
    ]
    names = {
        auto_cluster_name(size, spot=spot, workspace=workspace)
        for size in ("Standard_D4s_v3", "Standard_ND96asr_v4", "Standard_NC80adis_H100_v5", "Standard_NC40ads_H100_v5")
        for spot in (False, True)
        for workspace in workspaces
    }
    assert len(names) == 24 and all(valid_cluster_name(n) and len(n) <= 24 for n in names), names
    seed = auto_cluster_name("Standard_ND96asr_v4", spot=True, workspace=workspaces[0])  # the seed job's workspace
    assert re.fullmatch(r"cdp[0-9a-z]{5}-nd96asrv4-lp", seed) and seed == auto_cluster_name(
        "Standard_ND96asr_v4", spot=True, workspace=dict(workspaces[0])
    )
    auto = render("azureml.compute=auto", "resources.spot=true")
    assert auto.request["compute"]["name"] == seed
    assert auto.request["job"]["compute"] == f"azureml:{seed}"
    result = cli("render", str(AZURE_JOB), "-b", "azureml", "-o", "limits.recover_to=next_size")
    assert result.returncode == 2, result.stderr
    assert "the cluster gpu-cluster (azureml.compute) has one size" in result.stderr
    assert "remove azureml.compute" in result.stderr and "azureml.compute: auto" in result.stderr


@pytest.mark.parametrize("name", ["gpu-2", "gpu-", "ab-12-34"])
def test_a_cluster_name_whose_last_dash_has_no_letter_after_it_is_refused(name: str) -> None:
    result = cli("render", str(AZURE_JOB), "-b", "azureml", "-o", f"azureml.compute={name}")
    assert result.returncode == 2 and "a '-' followed by a letter later" in result.stderr, result.stderr


# -- through the rig ------------------------------------------------------------------------------------


def digits_spec(tmp_path: Path, azureml: dict[str, Any] | None = None, **resources: Any) -> Any:
    data = {
        "name": "digits-serverless",
        "code": {
            "dir": str(ROOT / "src_train"),
            "entry": "train.py",
            "args": ["--dataset", "digits", "--model", "cnn", "--epochs", "1"],
        },
        "resources": {"nodes": 1, "gpus_per_node": 0, "processes_per_node": 2, **resources},
        "limits": {"max_runtime": "10m"},
        "azureml": {
            "subscription_id": "00000000-0000-0000-0000-000000000000",
            "resource_group": "ml-rg",
            "workspace": "ml-workspace",
            "vm_size": "Standard_D4s_v3",
            **(azureml or {}),
        },
    }
    return spec_from_dict(data, base_dir=tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_serverless_job_runs_through_the_rig_without_a_cluster(model: WorkspaceModel, tmp_path: Path) -> None:
    b = backend(model, "sl1")
    plan = b.render(digits_spec(tmp_path))
    checks = {c.name: c for c in b.preflight(plan)}
    assert (
        checks["quota for standardDSv3Family"].ok and "the job needs 4" in checks["quota for standardDSv3Family"].detail
    )
    name = b.launch(plan)
    props = model.jobs[name]["properties"]
    assert "computeId" not in props or props["computeId"] is None
    assert props["resources"]["instanceType"] == "Standard_D4s_v3" and props["queueSettings"] == {"jobTier": "Standard"}
    assert not model.computes and not [c for c in model.calls if "/computes/" in c[1] and c[0] != "GET"]

    finished = AzureNodes(model, name, tmp_path / "nodes", Datastores(tmp_path / "blob")).finish(timeout=240)
    assert finished.ok, finished.describe()
    assert b.status(name).state is RunState.SUCCEEDED
    bill = b.bill(name)
    assert bill is not None and "Standard_D4s_v3" in str(bill.figures[0]) and "idle" not in str(bill.figures)


@pytest.mark.slow
def test_a_spot_job_on_a_dedicated_cluster_is_counted_against_dedicated_quota_and_refused_naming_both(
    model: WorkspaceModel, tmp_path: Path
) -> None:
    """The cluster's tier, not the spec's, decides where its nodes count: a spot job sent to an existing dedicated
    cluster uses dedicated vCPUs, so 0 dedicated quota refuses it at preflight, though low priority has room."""
    first = backend(model, "q1")
    first.launch(first.render(digits_spec(tmp_path, azureml={"compute": "cpu-dedicated"})))
    assert model.computes["cpu-dedicated"]["properties"]["properties"]["vmPriority"] == "Dedicated"
    model.set_usage("Standard DSv3 Family Cluster Dedicated vCPUs", limit=0)
    b = backend(model, "q2")
    spot = b.render(digits_spec(tmp_path, azureml={"compute": "cpu-dedicated"}, spot=True))
    with pytest.raises(PreflightFailed) as refused:
        b.launch(spot)
    said = str(refused.value)
    assert "quota for standardDSv3Family: Standard DSv3 Family Cluster Dedicated vCPUs: 0 vCPUs free" in said, said
    assert "cluster cpu-dedicated is dedicated" in said and "the job asks for spot (resources.spot: true)" in said
    assert len(model.jobs) == 1  # the spot job was never sent


@pytest.mark.parametrize(
    "command",
    [
        "[torchrun, --nproc-per-node=8, train.py]",
        "[/usr/bin/python3, -m, torch.distributed.run, train.py]",
        "[accelerate, launch, train.py]",
    ],
)
def test_a_launcher_in_code_command_is_refused_naming_why(command: str) -> None:
    result = cli(
        "render",
        str(AZURE_JOB),
        "-b",
        "azureml",
        "-o",
        "code.entry=null",
        "-o",
        "code.args=[]",
        "-o",
        f"code.command={command}",
    )
    assert result.returncode == 2, result.stderr
    assert "a launcher: on Azure ML every process of the job runs code.command" in result.stderr, result.stderr
    assert "already starts 8 per node" in result.stderr


@pytest.mark.slow
def test_without_computes_write_a_cluster_job_says_so_and_a_serverless_job_runs(
    model: WorkspaceModel, tmp_path: Path
) -> None:
    """The AzureML Data Scientist role cannot write computes: the rig answers 403 as ARM does."""
    model.compute_write = False
    b = backend(model, "rbac")
    with pytest.raises(UserError) as refused:
        b.launch(b.render(digits_spec(tmp_path, azureml={"compute": "cpu-new"})), checks=False)
    said = str(refused.value) + str(refused.value.hint)
    assert refused.value.exit_code == 2 and "workspaces/computes/write" in said
    assert "remove azureml.compute to run on serverless compute" in said and not model.jobs
    assert b.launch(b.render(digits_spec(tmp_path))) in model.jobs and not model.computes


@pytest.mark.slow
def test_a_new_job_goes_through_the_states_the_rest_examples_show_before_it_runs(
    model: WorkspaceModel, tmp_path: Path
) -> None:
    b = backend(model, "states")
    name = b.launch(b.render(digits_spec(tmp_path)))
    seen = [(s.native_state, s.state) for s in (b.status(name) for _ in range(4))]
    assert seen == [
        ("NotStarted", RunState.PENDING),
        ("Preparing", RunState.STARTING),
        ("Queued", RunState.PENDING),
        ("Queued", RunState.PENDING),
    ]
    for native, state, said in [
        ("Running", RunState.RUNNING, "Running"),
        ("NotResponding", RunState.UNKNOWN, "has not heard from the job's nodes"),
        ("Finalizing", RunState.RUNNING, "uploading its outputs and logs"),
        ("Completed", RunState.SUCCEEDED, "Completed"),
    ]:
        model.set_job_status(name, native)
        status = b.status(name)
        assert (status.native_state, status.state) == (native, state) and said in status.message, status


@pytest.mark.parametrize(("given", "rest"), [("user", "UserIdentity"), ("managed", "Managed")])
def test_the_job_identity_reaches_the_rest_body(given: str, rest: str, tmp_path: Path) -> None:
    from azure.ai.ml import load_job

    plan = render("azureml.compute=null", f"azureml.job_identity={given}")
    (tmp_path / "job.yml").write_text(plan.documents["job.yml"])
    assert rest_properties(load_job(tmp_path / "job.yml"))["identity"] == {"identityType": rest}
    assert "identity" not in render("azureml.compute=null").request["job"]
