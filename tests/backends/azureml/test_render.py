"""The Azure ML job and compute documents, as an Azure ML user would write them: inputs typed by what they
are, a pinned environment that says what it holds, CPU jobs without GPU advice, new clusters without SSH
open, and settings Azure ML would not honour refused at render. Every document here loads with
azure-ai-ml's own ``load_job``/``load_compute``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudddp.backends.azureml import AzureMLBackend
from cloudddp.backends.azureml.cluster import tier_mismatch
from cloudddp.backends.azureml.environment import DEFAULT_ENVIRONMENT, environment_field
from cloudddp.backends.azureml.inputs import uri_is_file
from cloudddp.backends.azureml.limits import CLUSTER_NAME, suggest_cluster
from cloudddp.backends.plugins import load_spec, spec_from_dict
from cloudddp.errors import UserError
from cloudddp.plan import Plan
from tests.support.cli import ROOT, cli

AZURE_JOB = ROOT / "jobs" / "cifar10-azureml.yaml"
CIFAR_TARBALL = "https://azuremlexamples.blob.core.windows.net/datasets/cifar-10-python.tar.gz"


def render(*overrides: str) -> Plan:
    return AzureMLBackend(token="r").render(load_spec(AZURE_JOB, list(overrides)))


def cpu_spec(tmp_path: Path, **azureml: Any) -> dict[str, Any]:
    """Two Standard_D4s_v3 nodes, no GPUs: the CPU take on the seed job."""
    return {
        "name": "digits-cpu",
        "code": {"dir": str(ROOT / "src_train"), "entry": "train.py"},
        "resources": {"nodes": 2, "gpus_per_node": 0},
        "azureml": {"compute": "cpu-cluster", "vm_size": "Standard_D4s_v3", **azureml},
    }


def loads_with_the_sdk(plan: Plan, tmp_path: Path) -> tuple[Any, Any]:
    from azure.ai.ml import load_compute, load_job

    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "job.yml").write_text(plan.documents["job.yml"])
    (tmp_path / "compute.yml").write_text(plan.documents["compute.yml"])
    return load_job(tmp_path / "job.yml"), load_compute(tmp_path / "compute.yml")


@pytest.mark.parametrize(
    ("uri", "is_file"),
    [
        (CIFAR_TARBALL, True),
        ("https://host/data/train.csv?sv=2024-01-01&sig=abc", True),  # a SAS query does not hide the extension
        ("azureml://datastores/workspaceblobstore/paths/cifar10/", False),
        ("azureml://datastores/workspaceblobstore/paths/cifar10", False),
        ("azureml://datastores/workspaceblobstore/paths/digits/digits.npz", True),
        ("https://host/datasets/release-1.2", False),  # a version number is not an extension
        ("wasbs://c@acct.blob.core.windows.net/images/", False),
    ],
)
def test_a_uri_is_a_file_when_its_last_segment_has_an_extension(uri: str, is_file: bool) -> None:
    assert uri_is_file(uri) is is_file


def test_inputs_are_typed_by_what_they_are_and_load_with_load_job(tmp_path: Path) -> None:
    (tmp_path / "local-dir").mkdir()
    (tmp_path / "local-dir" / "x.npz").write_bytes(b"x")
    (tmp_path / "labels.csv").write_text("a,b\n")
    data = cpu_spec(tmp_path)
    data["inputs"] = {
        "tarball": {"path": CIFAR_TARBALL, "arg": "--data-dir"},
        "store": {"path": "azureml://datastores/workspaceblobstore/paths/cifar10/", "mode": "mount"},
        "asset": {"path": "azureml:cifar-10-example@latest"},
        "asset_file": {"path": "azureml:iris-csv:3", "kind": "file"},
        "blob_dir": {"path": "https://acct.blob.core.windows.net/c/export", "kind": "folder"},
        "folder": {"path": "local-dir"},
        "csv": {"path": "labels.csv", "mode": "mount"},
    }
    plan = AzureMLBackend(token="i").render(spec_from_dict(data, base_dir=tmp_path))
    inputs = plan.request["job"]["inputs"]
    assert {name: (item["type"], item["mode"]) for name, item in inputs.items()} == {
        "tarball": ("uri_file", "download"),
        "store": ("uri_folder", "ro_mount"),
        "asset": ("uri_folder", "download"),
        "asset_file": ("uri_file", "download"),
        "blob_dir": ("uri_folder", "download"),
        "folder": ("uri_folder", "download"),
        "csv": ("uri_file", "ro_mount"),
    }
    assert inputs["csv"]["path"] == str(tmp_path / "labels.csv")
    assert "--data-dir ${{inputs.tarball}}" in plan.request["job"]["command"]
    assert any("inputs.asset: a data asset is passed as uri_folder" in d for d in plan.decisions)
    job, _ = loads_with_the_sdk(plan, tmp_path / "out")
    assert {name: (i.type, i.mode) for name, i in job.inputs.items()} == {
        name: (item["type"], item["mode"]) for name, item in inputs.items()
    }


def test_an_input_kind_that_contradicts_the_disk_is_refused(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    data = cpu_spec(tmp_path)
    data["inputs"] = {"d": {"path": "d", "kind": "file"}}
    with pytest.raises(UserError, match=r"inputs.d: kind is file but .* is a folder"):
        AzureMLBackend().render(spec_from_dict(data, base_dir=tmp_path))
    data["inputs"] = {"d": {"path": "missing"}}
    with pytest.raises(UserError, match=r"inputs.d: .*missing does not exist"):
        AzureMLBackend().render(spec_from_dict(data, base_dir=tmp_path))


def test_the_input_kind_does_not_change_the_checkpoint_folder() -> None:
    plain = render("inputs.cifar.path=azureml://datastores/workspaceblobstore/paths/cifar10/")
    typed = render(
        "inputs.cifar.path=azureml://datastores/workspaceblobstore/paths/cifar10/", "inputs.cifar.kind=folder"
    )
    assert plain.request["job"]["outputs"]["checkpoints"] == typed.request["job"]["outputs"]["checkpoints"]


def test_the_default_environment_is_pinned_and_says_what_it_holds() -> None:
    plan = render()
    assert plan.request["job"]["environment"] == DEFAULT_ENVIRONMENT
    assert DEFAULT_ENVIRONMENT.endswith("/acpt-pytorch-2.8-cuda12.6/versions/14")
    assert any(
        d.startswith("environment: curated acpt-pytorch-2.8-cuda12.6 version 14 (PyTorch 2.8, CUDA 12.6")
        for d in plan.decisions
    )


@pytest.mark.parametrize(
    ("reference", "field"),
    [
        ("azureml:AzureML-acpt-pytorch-2.8-cuda12.6:14", "azureml:AzureML-acpt-pytorch-2.8-cuda12.6:14"),
        ("azureml:my-env@latest", "azureml:my-env@latest"),
        (
            "azureml://registries/azureml/environments/sklearn-1.5/labels/latest",
            "azureml://registries/azureml/environments/sklearn-1.5/labels/latest",
        ),
        (
            "mcr.microsoft.com/azureml/openmpi5.0-ubuntu24.04:latest",
            {"image": "mcr.microsoft.com/azureml/openmpi5.0-ubuntu24.04:latest"},
        ),
        (
            "myregistry.azurecr.io/train@sha256:" + "ab" * 32,
            {"image": "myregistry.azurecr.io/train@sha256:" + "ab" * 32},
        ),
        ("pytorch/pytorch:latest", {"image": "pytorch/pytorch:latest"}),  # Docker Hub, as azureml-examples name it
        ("python:3.11-slim", {"image": "python:3.11-slim"}),  # an official Docker Hub image, with its tag
    ],
)
def test_environment_references_azure_ml_accepts(reference: str, field: Any, tmp_path: Path) -> None:
    assert environment_field(reference) == field
    plan = render(f"azureml.environment={reference}")
    job, _ = loads_with_the_sdk(plan, tmp_path)
    loaded = job.environment if isinstance(job.environment, str) else {"image": job.environment.image}
    workspace_ref = reference.startswith("azureml:") and not reference.startswith("azureml://")
    assert loaded == (reference.removeprefix("azureml:") if workspace_ref else field)  # the SDK drops "azureml:"


@pytest.mark.parametrize(
    ("reference", "why"),
    [
        ("azureml:AzureML-acpt-pytorch-2.8-cuda12.6", "needs a version or @latest"),
        ("AzureML-acpt-pytorch-2.8-cuda12.6@latest", "with the azureml: prefix"),
        ("pytorch", "not an environment reference"),
        ("azureml://registries/azureml/environments/acpt-pytorch-2.8-cuda12.6", "ends in /versions/<version>"),
        ("azureml:my env:1", "not an environment reference"),
    ],
)
def test_an_environment_reference_that_does_not_parse_is_refused_at_render(reference: str, why: str) -> None:
    with pytest.raises(UserError, match=rf"azureml.environment: .*{why}") as caught:
        render(f"azureml.environment={reference}")
    assert "azureml:AzureML-acpt-pytorch-2.8-cuda12.6:14" in str(caught.value)  # the hint shows the forms


def test_a_cpu_job_gets_no_infiniband_advice_and_is_told_about_its_cuda_environment(tmp_path: Path) -> None:
    plan = AzureMLBackend(token="c").render(spec_from_dict(cpu_spec(tmp_path), base_dir=tmp_path))
    assert not [w for w in plan.warnings if "InfiniBand" in w], plan.warnings
    assert plan.request["job"]["distribution"] == {"type": "pytorch", "process_count_per_instance": 1}
    assert plan.request["job"]["environment_variables"]["CLOUDDDP_DIST_BACKEND"] == "gloo"
    assert any("gloo uses TCP, not RDMA" in d for d in plan.decisions)
    assert any("all CUDA builds" in d for d in plan.decisions)
    data = cpu_spec(tmp_path)
    data["resources"]["processes_per_node"] = 4
    four = AzureMLBackend(token="c").render(spec_from_dict(data, base_dir=tmp_path))
    assert four.request["job"]["distribution"]["process_count_per_instance"] == 4
    data["resources"]["interconnect"] = "rdma"  # asked for: then the size is judged
    assert any("InfiniBand" in w for w in AzureMLBackend().render(spec_from_dict(data, base_dir=tmp_path)).warnings)
    loads_with_the_sdk(plan, tmp_path / "out")


def test_a_new_cluster_has_ssh_closed_unless_the_spec_gives_a_key(tmp_path: Path) -> None:
    closed = render()
    assert closed.request["compute"]["ssh_public_access_enabled"] is False
    assert "ssh_settings" not in closed.request["compute"]
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHpublickeyonly user@host"
    opened = render(f"azureml.ssh_public_key={key}")
    assert opened.request["compute"]["ssh_public_access_enabled"] is True
    assert opened.request["compute"]["ssh_settings"] == {"admin_username": "azureuser", "ssh_key_value": key}
    _, compute = loads_with_the_sdk(opened, tmp_path)
    rest = compute._to_rest_object().as_dict()["properties"]["properties"]
    assert rest["remoteLoginPortPublicAccess"] == "Enabled"
    assert rest["userAccountCredentials"]["adminUserSshPublicKey"] == key
    _, compute = loads_with_the_sdk(closed, tmp_path / "closed")
    assert compute._to_rest_object().as_dict()["properties"]["properties"]["remoteLoginPortPublicAccess"] == "Disabled"
    with pytest.raises(UserError, match="not an OpenSSH public key"):
        render("azureml.ssh_public_key=-----BEGIN OPENSSH PRIVATE KEY-----")


def test_settings_azure_ml_would_not_honour_are_refused() -> None:
    with pytest.raises(UserError, match=r"azureml.idle_time_before_scale_down.*azure-ai-ml sends no value for 0"):
        render("azureml.idle_time_before_scale_down=0")
    with pytest.raises(UserError, match=r"azureml.job_tier: spot applies to serverless compute only") as caught:
        render("azureml.job_tier=spot")
    assert "resources.spot: true" in str(caught.value)
    plan = render("azureml.idle_time_before_scale_down=60")
    assert plan.request["compute"]["idle_time_before_scale_down"] == 60
    assert any("scaling down after 60 s idle" in d for d in plan.decisions)
    assert "queue_settings" not in yaml.safe_load(plan.documents["job.yml"])


def test_a_gpu_size_missing_from_the_catalog_renders_with_a_warning_naming_what_is_unknown(tmp_path: Path) -> None:
    plan = render("azureml.vm_size=Standard_NV36ads_A10_v5", "resources.gpus_per_node=1", "resources.nodes=1")
    assert plan.request["compute"]["size"] == "Standard_NV36ads_A10_v5"
    (warning,) = [w for w in plan.warnings if "not in cloudddp's catalog" in w]
    assert warning.startswith("azureml.vm_size: Standard_NV36ads_A10_v5 is not in cloudddp's catalog")
    assert "GPUs, memory and interconnect are unknown to cloudddp" in warning
    job, compute = loads_with_the_sdk(plan, tmp_path)
    assert compute.size == "Standard_NV36ads_A10_v5" and job.resources.instance_count == 1
    two = render("azureml.vm_size=Standard_NV36ads_A10_v5", "resources.gpus_per_node=1")  # no 'r': no InfiniBand
    assert any("multi-node DDP over Ethernet does not scale" in w for w in two.warnings), two.warnings


@pytest.mark.parametrize(
    ("override", "says"),
    [
        (
            "azureml.compute=a-cluster-name-of-25chars",
            "azureml.compute: 'a-cluster-name-of-25chars' (25 characters) is not a name Azure ML accepts for a "
            "cluster: 3 to 24 characters, letters, digits and '-', starting with a letter",
        ),
        (
            "azureml.compute=gpu_cluster",
            "azureml.compute: 'gpu_cluster' (11 characters) is not a name Azure ML accepts",
        ),
        (
            "limits.max_runtime=10d",
            "limits.max_runtime: 10 days is over the 7-day limit for a job on low-priority nodes",
        ),
    ],
)
def test_what_the_service_would_refuse_exits_2_at_render_naming_the_rule(override: str, says: str) -> None:
    result = cli("render", str(AZURE_JOB), "-b", "azureml", "-o", "resources.spot=true", "-o", override)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert says in " ".join(result.stderr.split()), result.stderr


def test_the_job_lifetime_limits_and_cluster_names_azure_ml_sets() -> None:
    assert render("limits.max_runtime=10d").request["job"]["limits"]["timeout"] == 10 * 86400  # dedicated: 21 days
    with pytest.raises(UserError, match="over the 21-day limit for a job on Azure ML"):
        render("limits.max_runtime=22d")
    assert render("limits.max_runtime=7d", "resources.spot=true").request["compute"]["tier"] == "low_priority"
    assert render("azureml.compute=" + "c" * 24).request["compute"]["name"] == "c" * 24
    with pytest.raises(UserError, match=r"azureml.compute: 'c1' \(2 characters\)"):
        render("azureml.compute=c1")


def test_the_clusters_cloudddp_suggests_have_names_azure_ml_accepts() -> None:
    long = "team-vision-a100-train"  # 22 characters: with -dedicated it would be 32
    for suffix in ("-lowpri", "-dedicated"):
        assert CLUSTER_NAME.match(suggest_cluster(long, suffix)) and suggest_cluster(long, suffix).endswith(suffix)
    assert suggest_cluster("gpu", "-lowpri") == "gpu-lowpri"
    assert CLUSTER_NAME.match(suggest_cluster("9_gpus", ""))

    class Cluster:
        tier = "low_priority"

    warning = tier_mismatch(long, Cluster(), spot=False)
    assert warning is not None
    suggested = warning.split("azureml.compute=", 1)[1].split(":", 1)[0]
    assert CLUSTER_NAME.match(suggested) and len(suggested) <= 24, suggested


def test_each_warning_is_given_once() -> None:
    plan = render("limits.max_restarts=2", "azureml.vm_size=Standard_NV36ads_A10_v5", "resources.gpus_per_node=1")
    restarts = [w for w in plan.warnings if "do not restart failed processes" in w]
    assert len(restarts) == 1 and restarts[0].startswith("restarts: "), plan.warnings
    assert len(plan.warnings) == len(set(plan.warnings)) >= 3, plan.warnings


def test_a_vm_size_one_character_off_a_catalog_size_is_refused_as_a_typo() -> None:
    with pytest.raises(
        UserError, match=r"Standard_ND96asr_v44 is not an Azure VM size; did you mean 'Standard_ND96asr_v4'"
    ):
        load_spec(AZURE_JOB, ["azureml.vm_size=Standard_ND96asr_v44"])
    real = AzureMLBackend(token="t").render(load_spec(AZURE_JOB, ["azureml.vm_size=Standard_NV36ads_A10_v5"]))
    assert not any("did you mean" in w for w in real.warnings)  # a real size of another shape is no typo


def test_local_world_size_is_in_the_job_environment_under_the_pytorch_distribution_only() -> None:
    """Azure's PyTorch distribution sets RANK, LOCAL_RANK, WORLD_SIZE... but not LOCAL_WORLD_SIZE; under MPI the
    launcher derives it from Open MPI's variables (tests/backends/azureml/test_launchers.py)."""
    job = AzureMLBackend(token="t").render(load_spec(AZURE_JOB)).request["job"]
    assert job["distribution"]["type"] == "pytorch"
    assert job["environment_variables"]["LOCAL_WORLD_SIZE"] == str(job["distribution"]["process_count_per_instance"])
    mpi = AzureMLBackend(token="t").render(load_spec(AZURE_JOB, ["distribution.launcher=mpi"])).request["job"]
    assert "LOCAL_WORLD_SIZE" not in mpi["environment_variables"]


def test_a_low_priority_job_without_a_time_cadence_is_told_what_an_eviction_loses() -> None:
    spot = AzureMLBackend(token="t").render(load_spec(AZURE_JOB, ["resources.spot=true"]))
    assert any("checkpoint.every_minutes" in w for w in spot.warnings), spot.warnings
    timed = AzureMLBackend(token="t").render(
        load_spec(AZURE_JOB, ["resources.spot=true", "checkpoint.every_minutes=15"])
    )
    assert not any("checkpoint.every_minutes" in w for w in timed.warnings)
    assert timed.request["job"]["environment_variables"]["CLOUDDDP_CHECKPOINT_MINUTES"] == "15.0"


SUB = "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg/providers"
SUBNET = f"{SUB}/Microsoft.Network/virtualNetworks/vnet/subnets/train"
IDENTITY = f"{SUB}/Microsoft.ManagedIdentity/userAssignedIdentities/ml"


def test_a_new_cluster_can_join_a_subnet_without_public_ips_and_with_a_managed_identity(tmp_path: Path) -> None:
    """The compute document as azure-ai-ml loads it (its own schema) and would send it (its REST object)."""
    from azure.ai.ml import load_compute

    spec = load_spec(
        AZURE_JOB, [f"azureml.subnet={SUBNET}", "azureml.node_public_ip=false", f"azureml.identity={IDENTITY}"]
    )
    plan = AzureMLBackend(token="t").render(spec)
    (tmp_path / "compute.yml").write_text(plan.documents["compute.yml"])
    compute = load_compute(source=tmp_path / "compute.yml")
    assert compute.network_settings.subnet == SUBNET and compute.enable_node_public_ip is False
    assert compute.identity.type == "user_assigned"
    compute._set_full_subnet_name(
        "00000000-0000-0000-0000-000000000000", "rg"
    )  # what ComputeOperations.begin_create_or_update does first
    rest = compute._to_rest_object().as_dict()
    props = rest["properties"]["properties"]
    assert props["enableNodePublicIp"] is False and props["subnet"]["id"] == SUBNET
    assert IDENTITY in rest["identity"]["userAssignedIdentities"]
    system = AzureMLBackend(token="t").render(load_spec(AZURE_JOB, ["azureml.identity=system"]))
    assert "type: system_assigned" in system.documents["compute.yml"]


def test_no_public_ip_without_a_subnet_and_malformed_ids_exit_2_naming_what_to_give() -> None:
    for override, expected in [
        ("azureml.node_public_ip=false", "node_public_ip: false needs azureml.subnet"),
        ("azureml.subnet=my-subnet", "give the subnet's resource id"),
        (f"azureml.subnet={SUBNET.replace('00000000-0000-0000-0000-000000000000', 'sub')}", "subscription guid"),
        ("azureml.identity=my-identity", "'system' or a user-assigned identity's resource id"),
    ]:
        result = cli("render", str(AZURE_JOB), "-b", "azureml", "-o", override)
        assert result.returncode == 2 and expected in result.stderr and "Traceback" not in result.stderr, override


def test_shm_size_is_half_the_vm_sizes_memory_unless_given() -> None:
    from cloudddp.catalog import find

    def shm(*overrides: str) -> str:
        job = AzureMLBackend(token="t").render(load_spec(AZURE_JOB, list(overrides))).request["job"]
        return str(job["resources"]["shm_size"])

    sku = find("Standard_ND96asr_v4")
    assert sku is not None and shm() == f"{int(sku.ram_gb // 2)}g"
    assert shm("azureml.shm_size=64g") == "64g"
    assert shm("azureml.vm_size=Standard_NV36ads_A10_v5") == "16g"  # not in the catalog: the fallback


def test_a_multi_node_mpi_job_gets_the_acpt_ucx_settings_and_the_users_own_win() -> None:
    def env(*overrides: str) -> dict[str, str]:
        job = AzureMLBackend(token="t").render(load_spec(AZURE_JOB, list(overrides))).request["job"]
        return dict(job["environment_variables"])

    mpi = env("distribution.launcher=mpi")
    assert mpi["UCX_TLS"] == "tcp" and mpi["UCX_NET_DEVICES"] == "eth0"
    assert "UCX_TLS" not in env()  # the PyTorch distribution: NCCL's settings only
    assert env("distribution.launcher=mpi", "env.UCX_TLS=rc")["UCX_TLS"] == "rc"


def test_the_t4_sizes_are_in_the_catalog_and_a_job_that_does_not_fit_one_is_told_why() -> None:
    fits = AzureMLBackend(token="t").render(
        load_spec(
            AZURE_JOB,
            [
                "azureml.vm_size=Standard_NC16as_T4_v3",
                "resources.gpus_per_node=1",
                "resources.nodes=1",
                "resources.accelerator=T4",
            ],
        )
    )
    assert fits.request["compute"]["size"] == "Standard_NC16as_T4_v3"
    assert not any("not in cloudddp's catalog" in w for w in fits.warnings)
    result = cli("render", str(AZURE_JOB), "-b", "azureml", "-o", "azureml.vm_size=Standard_NC16as_T4_v3")
    assert result.returncode == 2 and "Standard_NC16as_T4_v3: 1 GPUs per node, the job needs 8" in result.stderr


def test_the_grace_a_script_is_told_is_what_its_launcher_gives_and_mpi_is_warned() -> None:
    torchrun, mpi = render(), render("distribution.launcher=mpi")
    assert torchrun.request["job"]["environment_variables"]["CLOUDDDP_SIGTERM_GRACE"] == "30"
    assert torchrun.request["job"]["environment_variables"]["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == "30"
    assert any("the script is told 30 s" in line for line in torchrun.decisions)
    assert mpi.request["job"]["environment_variables"]["CLOUDDDP_SIGTERM_GRACE"] == "1"
    assert any("mpirun passes it on and SIGKILLs the ranks 1 s later" in line for line in mpi.decisions)
    assert any("checkpoint.every_minutes" in w and "about 1 s" in w for w in mpi.warnings)
    assert not any("about 1 s" in w for w in torchrun.warnings)
    assert "_cloudddp_launch.py" in torchrun.request["job"]["command"]  # every job runs under the rank launcher
