"""SageMaker render: offline, validated against botocore's own service model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cloudddp.backends.plugins import load_spec, spec_from_dict
from cloudddp.backends.sagemaker import SageMakerBackend
from cloudddp.errors import UserError
from cloudddp.injob.shim import read_payload
from tests.backends.sagemaker.jobs import EBS_CPU_JOB, SMDDP_JOB
from tests.support.cli import ROOT


def launcher_payload(request: dict) -> dict:
    """What the shipped launcher gets: the toolkit decodes each hyperparameter and passes --key value."""
    args = [
        a
        for key in sorted(request["HyperParameters"])
        if key.startswith("cloudddp-")
        for a in (f"--{key}", json.loads(request["HyperParameters"][key]))
    ]
    return read_payload(args)


def sagemaker_jobs() -> list[Path]:
    return [p for p in sorted((ROOT / "jobs").glob("*.yaml")) if load_spec(p).section("sagemaker").role]


def validate(request: dict) -> None:
    import botocore.session
    from botocore.validate import ParamValidator

    model = botocore.session.get_session().get_service_model("sagemaker")
    report = ParamValidator().validate(request, model.operation_model("CreateTrainingJob").input_shape)
    assert not report.has_errors(), report.generate_report()
    assert request["ResourceConfig"]["InstanceType"] in model.shape_for("TrainingInstanceType").enum


@pytest.mark.parametrize("path", sagemaker_jobs(), ids=lambda p: p.name)
def test_every_sagemaker_job_renders_a_valid_request(path: Path) -> None:
    plan = SageMakerBackend().render(load_spec(path))
    validate(plan.request)
    hp = plan.request["HyperParameters"]
    assert all(isinstance(v, str) for v in hp.values())
    decoded = {k: json.loads(v) for k, v in hp.items()}  # every value JSON-encoded, as the SDK sends them
    assert decoded["sagemaker_program"] == "_cloudddp_launch.py"
    assert decoded["sagemaker_submit_directory"].endswith("/sourcedir.tar.gz")
    spec = load_spec(path)
    assert launcher_payload(plan.request)["argv"][: 1 + len(spec.code.args)] == [spec.code.entry, *spec.code.args]
    assert ("sagemaker_distributed_dataparallel_enabled" in hp) != ("sagemaker_torch_distributed_enabled" in hp)
    assert plan.request["CheckpointConfig"]["LocalPath"] == "/opt/ml/checkpoints"
    assert json.loads(plan.documents["CreateTrainingJob.json"]) == plan.request


def test_smddp_job_renders_the_smddp_launcher_and_backend() -> None:
    plan = SageMakerBackend().render(load_spec(ROOT / "jobs" / "cifar10-smddp.yaml"))
    req = plan.request
    assert req["HyperParameters"]["sagemaker_distributed_dataparallel_enabled"] == "true"
    assert req["Environment"]["CLOUDDDP_DIST_BACKEND"] == "smddp"
    assert req["EnableManagedSpotTraining"] is True
    assert req["StoppingCondition"]["MaxWaitTimeInSeconds"] >= req["StoppingCondition"]["MaxRuntimeInSeconds"]
    argv = launcher_payload(req)["argv"]
    assert argv[argv.index("--data-dir") + 1] == "/opt/ml/input/data/train"
    assert launcher_payload(req)["env"]["CLOUDDDP_DIST_BACKEND"] == "smddp"  # in every rank's argv, not only the env
    assert req["Environment"]["FI_PROVIDER"] == "efa"


def test_smddp_on_an_unsupported_instance_is_refused_with_the_alternatives() -> None:
    spec = load_spec(ROOT / "jobs" / "cifar10-smddp.yaml", ["sagemaker.instance_type=ml.g5.48xlarge"])
    with pytest.raises(UserError) as info:
        SageMakerBackend().render(spec)
    text = str(info.value)
    assert "smddp does not run on ml.g5.48xlarge" in text and "ml.p4d.24xlarge" in text


def test_multi_node_without_efa_warns_with_what_to_pick_instead() -> None:
    spec = load_spec(
        ROOT / "jobs" / "cifar10-resnet18.yaml", ["sagemaker.instance_type=ml.g5.2xlarge", "resources.gpus_per_node=1"]
    )
    plan = SageMakerBackend().render(spec)
    text = " ".join(plan.warnings)
    assert "does not scale" in text and "ml.g5.12xlarge" in text


def test_a_retired_instance_type_is_refused_naming_a_current_replacement() -> None:
    spec = load_spec(ROOT / "jobs" / "cifar10-resnet18.yaml", ["sagemaker.instance_type=ml.p3.16xlarge"])
    with pytest.raises(
        UserError,
        match=r"sagemaker.instance_type: ml.p3.16xlarge was retired on 2025-12-20.*"
        r"nearest current replacement: ml.p5en.48xlarge",
    ):
        SageMakerBackend().render(spec)


def test_secrets_are_placeholders_in_the_rendered_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_TOKEN", "s3cr3t-value-123")
    spec = load_spec(
        ROOT / "jobs" / "cifar10-smddp.yaml",
        ["env.TOKEN.from_env=MY_TOKEN", "env.TOKEN.secret=true", "env.PLAIN=visible"],
    )
    plan = SageMakerBackend().render(spec)
    assert "s3cr3t-value-123" not in plan.to_json()
    assert (
        plan.request["Environment"]["TOKEN"] == "<secret:TOKEN>" and plan.request["Environment"]["PLAIN"] == "visible"
    )


def test_missing_role_says_how_and_a_bare_flag_reaches_the_script() -> None:
    base = {
        "name": "x",
        "code": {"dir": str(ROOT / "src_train")},
        "resources": {"gpus_per_node": 1},
        "sagemaker": {
            "region": "us-east-1",
            "role": "arn:aws:iam::123456789012:role/r",
            "instance_type": "ml.g5.xlarge",
        },
    }
    data = json.loads(json.dumps(base))
    data["sagemaker"].pop("role")
    with pytest.raises(UserError, match=r"sagemaker\.role: the IAM role SageMaker runs the job as"):
        SageMakerBackend().render(spec_from_dict(data))
    flag = SageMakerBackend().render(
        spec_from_dict(
            {
                **base,
                "code": {"dir": str(ROOT / "src_train"), "args": ["--deterministic", "7"]},
                "sagemaker": {**base["sagemaker"], "image": "img:1"},
            }
        )
    )
    assert launcher_payload(flag.request)["argv"] == ["train.py", "--deterministic", "7"]  # a flag, a positional


def test_render_imports_no_aws_sdk() -> None:
    code = (
        "import sys; from cloudddp.backends.plugins import load_spec;"
        "from cloudddp.backends.sagemaker import SageMakerBackend;"
        f"SageMakerBackend().render(load_spec({str(ROOT / 'jobs' / 'cifar10-smddp.yaml')!r}));"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('boto3','botocore','sagemaker','torch')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"


# -- what the service would refuse, refused at render ---------------------------------------------------


def render_cli(*overrides: str) -> subprocess.CompletedProcess[str]:
    args = [a for o in overrides for a in ("-o", o)]
    return subprocess.run(
        [sys.executable, "-m", "cloudddp", "render", str(SMDDP_JOB), "-b", "sagemaker", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_a_volume_kms_key_on_a_local_nvme_type_exits_2_naming_the_reason_and_the_types_that_take_it() -> None:
    result = render_cli("sagemaker.volume_kms_key=alias/k")  # the job's ml.p4d.24xlarge
    assert result.returncode == 2, result.stdout[-300:] + result.stderr
    assert "sagemaker.volume_kms_key on ml.p4d.24xlarge" in result.stderr
    assert "local NVMe" in result.stderr and "refuses VolumeKmsKeyId" in result.stderr
    assert "ml.m5.*" in result.stderr  # the types that take it
    assert "Traceback" not in result.stderr


def test_a_volume_kms_key_on_an_ebs_type_is_sent() -> None:
    plan = SageMakerBackend().render(load_spec(SMDDP_JOB, [*EBS_CPU_JOB, "sagemaker.volume_kms_key=alias/k"]))
    assert plan.request["ResourceConfig"]["VolumeKmsKeyId"] == "alias/k"
    assert not any("VolumeSizeInGB" in d for d in plan.decisions)


def test_the_plan_says_volume_size_has_no_effect_on_local_nvme_types() -> None:
    plan = SageMakerBackend().render(load_spec(SMDDP_JOB))
    assert any("ml.p4d.24xlarge has local NVMe storage" in d and "VolumeSizeInGB" in d for d in plan.decisions)


def test_network_isolation_with_requirements_from_an_index_exits_2(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    (code / "requirements.txt").write_text("numpy\n")
    result = render_cli(f"code.dir={code}", "sagemaker.network_isolation=true")
    assert result.returncode == 2, result.stdout[-300:] + result.stderr
    assert "sagemaker.network_isolation with requirements" in result.stderr and "--no-index" in result.stderr
    (code / "requirements.txt").write_text("--no-index\n./wheels/dep-1.0-py3-none-any.whl\n")  # from the snapshot
    assert render_cli(f"code.dir={code}", "sagemaker.network_isolation=true").returncode == 0


def test_efa_settings_follow_sagemakers_own_list_of_efa_types() -> None:
    on_p4d = SageMakerBackend().render(load_spec(SMDDP_JOB, ["distribution.backend=nccl"]))
    assert on_p4d.request["Environment"]["FI_PROVIDER"] == "efa"
    g5 = [
        "distribution.backend=nccl",
        "resources.accelerator=null",
        "resources.gpus_per_node=4",
        "resources.interconnect=any",
        "sagemaker.instance_type=ml.g5.12xlarge",
    ]
    on_g5 = SageMakerBackend().render(load_spec(SMDDP_JOB, g5))
    assert "FI_PROVIDER" not in on_g5.request["Environment"]
    assert any("SM_EFA_NCCL_INSTANCES" in w for w in on_g5.warnings), on_g5.warnings


def test_sagemaker_charts_every_metric_the_template_and_the_shared_script_print() -> None:
    """A MetricDefinition per name, reading compact JSON and json.dumps's default (a space after the colon)."""
    import re

    from cloudddp.observe.metrics import STANDARD_METRICS

    plan = SageMakerBackend().render(load_spec(ROOT / "jobs" / "cifar10-resnet18.yaml"))
    charted = {m["Name"]: m["Regex"] for m in plan.request["AlgorithmSpecification"]["MetricDefinitions"]}
    template = (ROOT / "cloudddp" / "data" / "train_template.py").read_text()
    printed = set(re.findall(r'"(\w+)": ', "".join(re.findall(r"json\.dumps\((\{.*?\})\)", template))))
    assert printed == {"epoch", "loss"}
    for name in printed | set(STANDARD_METRICS):
        for line in (json.dumps({"x_" + name: 9, name: 0.25}), json.dumps({name: 0.25}, separators=(",", ":"))):
            found = re.search(charted[name], f"[rank0]:CLOUDDDP_METRIC {line}")
            assert found is not None and found.group(1) == "0.25", (name, line)
    declared = load_spec(ROOT / "jobs" / "cifar10-resnet18.yaml", ["metrics=[{name: loss, regex: 'L=([0-9]+)'}]"])
    names = [
        m["Name"] for m in SageMakerBackend().render(declared).request["AlgorithmSpecification"]["MetricDefinitions"]
    ]
    assert names.count("loss") == 1


def test_the_plan_says_which_start_applies_to_the_image() -> None:
    job = ROOT / "jobs" / "cifar10-smddp.yaml"
    official = SageMakerBackend().render(load_spec(job))
    assert any(d.startswith("start: an official PyTorch DLC") for d in official.decisions)
    assert not [w for w in official.warnings if "not an official PyTorch DLC" in w]
    own = SageMakerBackend().render(
        load_spec(job, ["sagemaker.image=111122223333.dkr.ecr.us-east-1.amazonaws.com/t:1"])
    )
    assert any(d.startswith("start: not an official PyTorch DLC") and "_cloudddp_start.py" in d for d in own.decisions)
    assert any("smddp starts only through the DLC's entry" in w for w in own.warnings)  # smddp needs the DLC


def test_fewer_processes_than_gpus_are_what_the_request_starts_and_the_warning_says_so() -> None:
    spec = load_spec(ROOT / "jobs" / "cifar10-resnet18.yaml", ["sagemaker.instance_type=ml.p4d.24xlarge"])
    plan = SageMakerBackend().render(spec)
    four = SageMakerBackend().render(
        load_spec(
            ROOT / "jobs" / "cifar10-resnet18.yaml",
            ["sagemaker.instance_type=ml.p4d.24xlarge", "resources.gpus_per_node=4"],
        )
    )
    assert json.loads(four.request["HyperParameters"]["sagemaker_mpi_num_of_processes_per_host"]) == 4
    (warning,) = [w for w in four.warnings if "resources.gpus_per_node is 4" in w]
    assert "starts 4 processes per host" in warning and "4 GPUs are billed and idle" in warning
    assert not [w for w in plan.warnings if "gpus_per_node is" in w]
