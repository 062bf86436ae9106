"""The Azure ML backend: render checked by azure-ai-ml's own loaders, and the real SDK driven offline
against an in-memory workspace (REST routes) with code snapshots and log files on a real Azurite."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cloudddp.backends.azureml import AzureMLBackend
from cloudddp.backends.azureml.workspace import require_workspace, workspace_fields
from cloudddp.backends.checks import PreflightFailed
from cloudddp.backends.plugins import load_spec
from cloudddp.backends.status import RunState
from cloudddp.errors import UserError
from cloudddp.runs.database import RunDatabase
from tests.support.azure_rig import WorkspaceAdapter, WorkspaceModel
from tests.support.azure_rig import rig_backend as backend
from tests.support.cli import ROOT
from tests.support.mlflow_server import MlflowServer
from tests.support.waiting import wait_until

AZURE_JOB = ROOT / "jobs" / "cifar10-azureml.yaml"


def azure_jobs() -> list[Path]:
    return [p for p in sorted((ROOT / "jobs").glob("*.yaml")) if load_spec(p).section("azureml").compute]


def render(path: Path = AZURE_JOB, *overrides: str, token: str = "t1"):
    return AzureMLBackend(token=token).render(load_spec(path, list(overrides)))


@pytest.mark.parametrize("path", azure_jobs(), ids=lambda p: p.name)
def test_every_azure_job_renders_yaml_that_azure_ai_ml_loads(path: Path, tmp_path: Path) -> None:
    from azure.ai.ml import load_compute, load_job

    plan = render(path)
    (tmp_path / "job.yml").write_text(plan.documents["job.yml"])
    (tmp_path / "compute.yml").write_text(plan.documents["compute.yml"])
    job, compute = load_job(tmp_path / "job.yml"), load_compute(tmp_path / "compute.yml")
    spec = load_spec(path)
    assert job.distribution.process_count_per_instance == spec.resources.gpus_per_node
    assert type(job.distribution).__name__ == "PyTorchDistribution"
    assert job.resources.instance_count == spec.resources.nodes
    assert job.compute == spec.section("azureml").compute and compute.name == spec.section("azureml").compute
    assert compute.min_instances == 0 and compute.max_instances >= spec.resources.nodes


def test_seed_scenario_two_ib_nodes_one_process_per_gpu_cluster_zero_to_four() -> None:
    plan = render()
    job, compute = plan.request["job"], plan.request["compute"]
    assert job["distribution"] == {"type": "pytorch", "process_count_per_instance": 8}
    assert job["resources"]["instance_count"] == 2
    assert compute["size"] == "Standard_ND96asr_v4" and (compute["min_instances"], compute["max_instances"]) == (0, 4)
    assert job["environment_variables"]["NCCL_IB_PCI_RELAXED_ORDERING"] == "1"
    assert "NCCL_TOPO_FILE" not in job["environment_variables"]  # /opt/microsoft/*-topo.xml is not in the container
    assert "${{inputs.cifar}}" in job["command"] and job["inputs"]["cifar"]["type"] == "uri_folder"
    assert not plan.warnings


def test_render_on_a_size_without_ib_for_two_nodes_warns_and_names_the_ib_size_with_the_same_gpu() -> None:
    plan = render(AZURE_JOB, "azureml.vm_size=Standard_NC96ads_A100_v4", "resources.gpus_per_node=4")
    text = " ".join(plan.warnings)
    assert "does not scale" in text and "Standard_ND96asr_v4" in text


def test_the_retired_nc24rs_v3_of_the_seed_is_refused_naming_a_current_replacement() -> None:
    with pytest.raises(
        UserError,
        match=r"azureml.vm_size: Standard_NC24rs_v3 was retired on 2025-09-30.*"
        r"nearest current replacement: Standard_ND96isr_H200_v5",
    ):
        render(AZURE_JOB, "azureml.vm_size=Standard_NC24rs_v3", "resources.gpus_per_node=4")


def test_checks_the_sdk_does_not_make() -> None:
    with pytest.raises(UserError, match="Duplicate GPU detected"):
        render(AZURE_JOB, "resources.gpus_per_node=16")
    with pytest.raises(UserError, match="NCCL_IB_DISABLE=1"):
        render(AZURE_JOB, "env.NCCL_IB_DISABLE=1")
    with pytest.raises(UserError, match="not offered as spot/low priority"):
        render(
            AZURE_JOB,
            "azureml.vm_size=Standard_ND96isr_H200_v5",
            "resources.gpus_per_node=8",
            "resources.accelerator=H200",
            "resources.spot=true",
        )
    with pytest.raises(UserError, match="smddp: the SageMaker data-parallel library runs only on SageMaker"):
        render(AZURE_JOB, "distribution.backend=smddp")
    low = render(AZURE_JOB, "resources.spot=true")
    assert low.request["compute"]["tier"] == "low_priority"


def test_secrets_stay_out_of_the_rendered_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN_SRC", "hf_canary_123456")
    plan = render(AZURE_JOB, "env.HF_TOKEN.from_env=HF_TOKEN_SRC", "env.HF_TOKEN.secret=true")
    assert "hf_canary_123456" not in plan.to_json()
    assert plan.request["job"]["environment_variables"]["HF_TOKEN"] == "<secret:HF_TOKEN>"


def test_render_imports_no_azure_sdk() -> None:
    code = (
        "import sys; from cloudddp.backends.plugins import load_spec;"
        "from cloudddp.backends.azureml import AzureMLBackend;"
        f"AzureMLBackend().render(load_spec({str(AZURE_JOB)!r}));"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('azure','torch','boto3')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"


def test_workspace_from_spec_then_config_json_then_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AZURE_SUBSCRIPTION_ID", "AZURE_RESOURCE_GROUP", "AZUREML_WORKSPACE_NAME"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(UserError, match=r"AZURE_SUBSCRIPTION_ID.*AZURE_RESOURCE_GROUP.*AZUREML_WORKSPACE_NAME"):
        require_workspace(workspace_fields(None, cwd=tmp_path))
    (tmp_path / ".azureml").mkdir()
    config = {"subscription_id": "s", "resource_group": "r", "workspace_name": "w"}
    (tmp_path / ".azureml" / "config.json").write_text(json.dumps(config))
    (tmp_path / "sub").mkdir()
    assert require_workspace(workspace_fields(None, cwd=tmp_path / "sub")).name == "w"
    azureml = load_spec(AZURE_JOB).section("azureml")
    assert require_workspace(workspace_fields(azureml, cwd=tmp_path / "sub")).name == "ml-workspace"


# -- the real SDK against the offline workspace -----------------------------------------------------


class Steps:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def step(self, description: str) -> None:
        self.lines.append(description)

    def advance(self, description: str, done: int, total: int | None) -> None:
        self.lines.append(description)


@pytest.mark.slow
def test_provision_submit_status_logs_metrics_cancel_through_the_real_sdk(
    model: WorkspaceModel, mlflow_server: MlflowServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    model.mlflow = mlflow_server
    monkeypatch.setenv("WANDB_SRC", "wandb-canary-9f8e7d")
    b = backend(model, token="e2e")
    plan = b.render(load_spec(AZURE_JOB, ["env.WANDB_API_KEY.from_env=WANDB_SRC", "env.WANDB_API_KEY.secret=true"]))
    steps = Steps()
    name = b.launch(plan, progress=steps)

    cluster = model.computes["gpu-cluster"]["properties"]["properties"]
    assert cluster["vmSize"] == "Standard_ND96asr_v4"
    assert cluster["scaleSettings"]["minNodeCount"] == 0 and cluster["scaleSettings"]["maxNodeCount"] == 4
    assert cluster["vmPriority"] == "Dedicated"
    assert any("creating cluster gpu-cluster" in s for s in steps.lines)

    props = model.jobs[name]["properties"]
    assert props["distribution"] == {"distributionType": "PyTorch", "processCountPerInstance": 8}
    assert props["resources"]["instanceCount"] == 2
    assert props["computeId"].endswith("/computes/gpu-cluster")
    assert props["environmentId"] == "azureml://registries/azureml/environments/acpt-pytorch-2.8-cuda12.6/versions/14"
    assert props["environmentVariables"]["WANDB_API_KEY"] == "wandb-canary-9f8e7d"  # reaches the job at submit...
    assert "wandb-canary-9f8e7d" not in json.dumps(RunDatabase().list(limit=1000).__repr__())  # ...and stored nowhere
    code = [c for c in model.codes.values()]
    assert len(code) == 1 and model.pending_uploads == 1
    container, prefix = model.code_location(name)  # the snapshot this job names, in this test's own container
    assert container == model.container and prefix.startswith("LocalUpload/")
    train = model.container_client().download_blob(f"{prefix}/train.py").readall()
    assert train == (ROOT / "src_train" / "train.py").read_bytes()

    assert b.status(name).state is RunState.PENDING
    model.set_job_status(name, "Running")
    assert b.status(name).state is RunState.RUNNING

    model.write_log(name, 0, "starting rank 0\n")
    model.write_log(name, 1, "starting rank 1\n")
    seen: list[tuple[str, str]] = []
    follower = threading.Thread(
        target=lambda: seen.extend((line.source, line.text) for line in b.logs(name, follow=True))
    )
    follower.start()
    wait_until(lambda: ("rank1", "starting rank 1") in seen, timeout=60)  # the follower is reading
    metric = 'CLOUDDDP_METRIC {"epoch":1,"step":10,"time":1.0,"train_loss":0.42,"test_acc":0.91}'
    model.write_log(name, 0, metric + "\n")
    wait_until(lambda: ("rank0", metric) in seen, timeout=60)  # arrived while following: the job still runs
    assert follower.is_alive() and b.status(name).state is RunState.RUNNING
    model.set_job_status(name, "Completed")
    follower.join(timeout=60)
    assert not follower.is_alive()  # the job's end ends the follow
    assert ("rank0", "starting rank 0") in seen and ("rank1", "starting rank 1") in seen
    records = list(b.metrics(name))  # nothing in the job's MLflow run: the metric lines of its logs
    assert len(records) == 1 and records[0].values == {"train_loss": 0.42, "test_acc": 0.91}
    assert b.status(name).state is RunState.SUCCEEDED

    model.set_job_status(name, "Running")
    model.held_cancels.add(name)
    assert b.cancel(name) is True
    assert b.status(name).state is RunState.STOPPING  # CancelRequested, as Azure ML answers first
    model.held_cancels.discard(name)
    wait_until(lambda: b.status(name).state is RunState.CANCELLED, timeout=30)


@pytest.mark.slow
def test_second_submit_of_unchanged_code_uploads_nothing_and_a_retry_finds_its_job(model: WorkspaceModel) -> None:
    spec = load_spec(AZURE_JOB)
    first = backend(model, token="r1")
    name = first.launch(first.render(spec))
    assert model.pending_uploads == 1
    second = backend(model, token="r2")
    second.launch(second.render(spec))
    assert model.pending_uploads == 1  # the SDK's content-hash lookup found the snapshot
    puts = [c for c in model.calls if c[0] == "PUT" and "/jobs/" in c[1]]
    again = backend(model, token="r1")
    assert again.launch(again.render(spec)) == name  # a retried submit: same name, found, not sent twice
    assert [c for c in model.calls if c[0] == "PUT" and "/jobs/" in c[1]] == puts


@pytest.mark.slow
def test_a_lost_job_put_response_is_retried_as_azure_answers_it_without_a_second_run(
    model: WorkspaceModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first job PUT reaches the workspace, which starts the job, and its response is lost: azure-core sends
    the PUT again, Azure ML takes it as an update of the job (200, tags only), and the submit succeeds with the
    one job still running, its MLflow run made once."""
    import requests
    from urllib3.exceptions import ProtocolError

    real_send = WorkspaceAdapter.send
    lost: list[str] = []

    def send(adapter: WorkspaceAdapter, request: requests.PreparedRequest, **kwargs: object) -> requests.Response:
        response = real_send(adapter, request, **kwargs)
        if request.method == "PUT" and "/jobs/" in (request.url or "") and not lost:
            name = (request.url or "").split("/jobs/")[1].split("?")[0]
            lost.append(name)
            model.set_job_status(name, "Running")  # the service went on with it
            raise requests.ConnectionError(ProtocolError("Connection aborted.", ConnectionResetError(104, "reset")))
        return response

    monkeypatch.setattr(WorkspaceAdapter, "send", send)
    b = backend(model, token="lost")
    name = b.launch(b.render(load_spec(AZURE_JOB)))
    assert lost == [name]
    assert [path.rsplit("/", 1)[1] for method, path in model.calls if method == "PUT" and "/jobs/" in path] == [
        name
    ] * 2
    assert model.jobs[name]["properties"]["status"] == "Running"  # not queued again as a new job
    assert b.status(name).state is RunState.RUNNING


@pytest.mark.slow
def test_no_provision_leaves_the_cluster_alone_and_a_small_cluster_is_grown(model: WorkspaceModel) -> None:
    spec = load_spec(AZURE_JOB)
    b = backend(model, token="np")
    b.launch(b.render(spec), provision=False)
    assert "gpu-cluster" not in model.computes
    small = load_spec(AZURE_JOB, ["azureml.max_nodes=2"])
    grow = backend(model, token="g1")
    grow.launch(grow.render(small))
    assert model.computes["gpu-cluster"]["properties"]["properties"]["scaleSettings"]["maxNodeCount"] == 2
    bigger = load_spec(AZURE_JOB, ["resources.nodes=3"])
    steps = Steps()
    g2 = backend(model, token="g2")
    g2.launch(g2.render(bigger), progress=steps, checks=False)  # its quota check fails in the rig: not the point here
    assert model.computes["gpu-cluster"]["properties"]["properties"]["scaleSettings"]["maxNodeCount"] == 4
    assert any("growing cluster" in s for s in steps.lines)
    grown = [body["properties"]["properties"]["scaleSettings"]["maxNodeCount"] for _, body in model.compute_updates]
    assert grown == [4]
    assert sum(1 for c in model.calls if c[0] == "PUT" and "/computes/" in c[1]) == 1  # the creation only


@pytest.mark.slow
def test_preflight_checks_workspace_size_and_quota(model: WorkspaceModel) -> None:
    b = backend(model)
    checks = {c.name: c for c in b.preflight(b.render(load_spec(AZURE_JOB)))}
    family = "quota for standardNDASv4_A100Family"
    assert checks["workspace reachable"].ok and checks["Standard_ND96asr_v4 offered in eastus"].ok
    assert checks[family].ok and "needs 192" in checks[family].detail
    over = {c.name: c for c in b.preflight(b.render(load_spec(AZURE_JOB, ["resources.nodes=3"])))}
    assert over[family].ok is False and over[family].fix


@pytest.mark.slow
def test_a_spot_job_counts_against_the_regional_low_priority_quota_not_the_family(model: WorkspaceModel) -> None:
    """Usages named as in ``Usage/list.json``; NDASv4_A100 at zero dedicated cores, as specialized families start."""
    model.set_usage("Standard NDASv4_A100 Family Cluster Dedicated vCPUs", limit=0)
    b = backend(model)
    checks = {c.name: c for c in b.preflight(b.render(load_spec(AZURE_JOB, ["resources.spot=true"])))}
    regional = checks["low-priority quota (regional)"]
    assert regional.ok and "the job needs 192" in regional.detail, regional
    assert not [c for c in checks.values() if c.ok is not True], checks  # the family's dedicated zero is not asked
    dedicated = {c.name: c for c in b.preflight(b.render(load_spec(AZURE_JOB)))}
    assert dedicated["quota for standardNDASv4_A100Family"].ok is False  # the same job on dedicated nodes: refused

    model.set_usage("Total Cluster LowPriority Regional vCPUs", limit=200, current=18)
    over = b.render(load_spec(AZURE_JOB, ["resources.spot=true"]))
    with pytest.raises(PreflightFailed) as refused:
        b.launch(over)
    assert refused.value.exit_code == 2 and not model.jobs
    named = "low-priority quota (regional): Total Cluster LowPriority Regional vCPUs: 182 vCPUs free"
    assert named in str(refused.value)


@pytest.mark.slow
def test_a_quota_lookup_that_matches_nothing_is_said_at_submit_naming_what_was_looked_for(
    model: WorkspaceModel,
) -> None:
    model.usages = [u for u in model.usages if "NDASv4_A100" not in u["name"]["value"]]
    b = backend(model, token="nomatch")
    steps = Steps()
    b.launch(b.render(load_spec(AZURE_JOB)), progress=steps)  # not a failed check: the job is submitted
    looked = "'Standard NDASv4_A100 Family Cluster Dedicated vCPUs' (or 'standardNDASv4_A100Family')"
    said = [s for s in steps.lines if s.startswith("warning: not checked: quota for standardNDASv4_A100Family")]
    assert len(said) == 1 and looked in said[0], steps.lines
    assert len(model.jobs) == 1


@pytest.mark.slow
def test_throttling_and_server_errors_are_retried_by_the_sdk_without_a_duplicate_job(model: WorkspaceModel) -> None:
    model.faults += [("GET", "/computes/", 429), ("PUT", "/jobs/", 503), ("GET", "/jobs/", 500)]
    b = backend(model, token="faults")
    name = b.launch(b.render(load_spec(AZURE_JOB)))
    assert model.faults == []  # every injected fault was hit, and retried past
    assert list(model.jobs) == [name]
    assert sum(1 for c in model.calls if c[0] == "PUT" and c[1].endswith(f"/jobs/{name}")) == 2


def test_text_around_a_binding_in_an_argument_is_quoted(tmp_path: Path) -> None:
    """``${{outputs.model}}/my results; touch x`` is one argument once Azure ML has replaced the reference (as
    the README says), not a second command."""
    marker = tmp_path / "touched"
    plan = render(AZURE_JOB, f"code.args=['--out', '${{{{outputs.model}}}}/my results; touch {marker}']")
    command = plan.request["job"]["command"]
    assert f"${{{{outputs.model}}}}'/my results; touch {marker}'" in command
    resolved = re.sub(r"\$\{\{[^}]*\}\}", "/mnt/azureml/model", command)  # what Azure ML does with a reference
    argv = subprocess.run(
        ["bash", "-c", 'python() { printf "%s\\n" "$@"; }; ' + resolved], capture_output=True, text=True
    )
    assert argv.returncode == 0 and "/mnt/azureml/model/my results; touch" in argv.stdout and not marker.exists()
