"""Every SageMaker training instance type: accepted by name when it can run the job, refused with a reason otherwise.

The catalog's rows (``cloudddp/data/skus.csv``) and the valid types without a row (checked against EC2's data,
``cloudddp/data/sagemaker_instance_hardware.json``) are both covered, each with a job that fits it.
"""

from __future__ import annotations

import gzip
import json
from importlib import resources
from pathlib import Path

import pytest

from cloudddp.backends.plugins import load_spec
from cloudddp.backends.sagemaker import SageMakerBackend
from cloudddp.backends.sagemaker.hardware import HARDWARE_FILE, hardware
from cloudddp.backends.sagemaker.limits import training_instance_types
from cloudddp.backends.sagemaker.volumes import has_local_storage
from cloudddp.catalog import skus
from cloudddp.errors import UserError
from tests.backends.sagemaker.test_render import validate
from tests.support.cli import ROOT

JOB = ROOT / "jobs" / "cifar10-resnet18.yaml"
CPU = ["distribution.backend=gloo", "resources.gpus_per_node=0", "resources.nodes=1"]


def ec2_types() -> dict[str, dict]:
    """moto's copy of EC2 DescribeInstanceTypes, by EC2 name."""
    import moto

    path = Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz"
    data: dict[str, dict] = json.loads(gzip.decompress(path.read_bytes()))
    return data


def render(instance_type: str, *overrides: str) -> dict:
    spec = load_spec(JOB, [f"sagemaker.instance_type={instance_type}", *overrides])
    request: dict = SageMakerBackend(token="t").render(spec).request
    return request


def fitting_job(gpus: int, efa: bool) -> list[str]:
    """A job that fits a type with ``gpus`` GPUs: two nodes where it has EFA, one where it has not."""
    return [f"resources.gpus_per_node={gpus}", f"resources.nodes={2 if efa else 1}"]


CATALOG = [s for s in skus("aws") if s.cuda and not s.retired]


@pytest.mark.parametrize("sku", CATALOG, ids=lambda s: s.size)
def test_every_catalog_row_renders_for_a_job_it_fits(sku) -> None:
    request = render(sku.size, *fitting_job(sku.gpus, sku.scales_multi_node))
    validate(request)
    assert request["ResourceConfig"]["InstanceType"] == sku.size
    assert json.loads(request["HyperParameters"]["sagemaker_mpi_num_of_processes_per_host"]) == sku.gpus


@pytest.mark.parametrize("sku", [s for s in skus("aws") if s not in CATALOG], ids=lambda s: s.size)
def test_a_catalog_row_that_cannot_run_a_cuda_job_says_why(sku) -> None:
    with pytest.raises(UserError) as info:
        render(sku.size, *fitting_job(sku.gpus, sku.scales_multi_node))
    assert "retired" in str(info.value) or "not a CUDA GPU" in str(info.value)


def uncatalogued() -> list[str]:
    """The valid types without a catalog row: every accelerated one, and one CPU type per family (they render
    alike)."""
    types, families = [], set()
    for name in sorted(set(training_instance_types()) - {s.size for s in skus("aws")}):
        hw, family = hardware().get(name), name.split(".")[1]
        if hw is None or hw.gpus or hw.neuron or family not in families:
            types.append(name)
            families.add(family)
    return types


UNCATALOGUED = uncatalogued()


@pytest.mark.parametrize("name", UNCATALOGUED)
def test_every_type_without_a_row_renders_for_a_job_it_fits_or_says_why(name: str) -> None:
    hw = hardware().get(name)
    if hw is not None and hw.neuron:
        with pytest.raises(UserError, match="Neuron devices, not CUDA GPUs"):
            render(name, *fitting_job(max(hw.neuron, 1), hw.efa))
        return
    if hw is not None and hw.gpus == 0:
        request = render(name, *CPU)
    else:
        request = render(name, *fitting_job(hw.gpus if hw else 8, hw.efa if hw else True))
    validate(request)
    assert request["ResourceConfig"]["InstanceType"] == name


def test_a_p5_4xlarge_with_one_gpu_renders_and_says_where_its_hardware_comes_from() -> None:
    spec = load_spec(JOB, ["sagemaker.instance_type=ml.p5.4xlarge", "resources.gpus_per_node=1", "resources.nodes=1"])
    plan = SageMakerBackend(token="t").render(spec)
    validate(plan.request)
    assert any("1× H100 80 GB, EFA, from EC2's instance data" in line for line in plan.decisions)
    assert any("no cost estimate" in w for w in plan.warnings)


@pytest.mark.parametrize(
    ("name", "overrides", "reason"),
    [
        ("ml.p5.4xlarge", [], "it has 1 H100 GPU(s); the job asks for 8 per node"),
        ("ml.p6-b300.48xlarge", ["resources.accelerator=H100"], "its GPU is B300; the job asks for H100"),
        ("ml.g7e.48xlarge", ["resources.min_gpu_memory_gb=141"], "96 GB per GPU; the job needs 141"),
        ("ml.g7e.48xlarge", ["resources.interconnect=rdma", "distribution.backend=smddp"], "smddp runs only"),
        ("ml.g7e.2xlarge", ["resources.gpus_per_node=1", "resources.interconnect=rdma"], "no EFA"),
        ("ml.trn2.48xlarge", [], "Neuron devices, not CUDA GPUs"),
        ("ml.m5.large", [], "it has no GPU; the job asks for 8 per node"),
    ],
)
def test_a_type_without_a_row_is_refused_with_the_reason(name: str, overrides: list[str], reason: str) -> None:
    with pytest.raises(UserError) as info:
        render(name, *overrides)
    assert reason in str(info.value) and name in str(info.value)


def test_the_hardware_file_is_ec2s_data_as_moto_bundles_it() -> None:
    """The packaged copy equals the installed moto's for every type it holds, and holds every type EC2 describes."""
    ec2, ours = ec2_types(), hardware()
    assert set(ours) == {t for t in training_instance_types() if t.removeprefix("ml.") in ec2}
    for name, hw in ours.items():
        row = ec2[name.removeprefix("ml.")]
        gpus = row.get("GpuInfo", {}).get("Gpus", [])
        assert hw.gpus == sum(g["Count"] for g in gpus), name
        assert hw.gpu == (gpus[0]["Name"] if gpus else ""), name
        assert hw.neuron == sum(d["Count"] for d in row.get("NeuronInfo", {}).get("NeuronDevices", [])), name
        assert hw.efa == bool(row["NetworkInfo"].get("EfaSupported")), name
    assert json.loads(resources.files("cloudddp").joinpath(f"data/{HARDWARE_FILE}").read_text())["source"]


def test_local_nvme_families_agree_with_ec2() -> None:
    """A volume KMS key is refused exactly where EC2 says the type has instance storage (g7e included)."""
    ec2 = ec2_types()
    for name in training_instance_types():
        row = ec2.get(name.removeprefix("ml."))
        if row is not None:
            assert has_local_storage(name) == bool(row.get("InstanceStorageSupported")), name
    assert has_local_storage("ml.g7e.2xlarge")
