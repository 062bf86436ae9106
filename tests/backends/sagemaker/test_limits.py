"""CreateTrainingJob's limits: cloudddp's constants equal botocore's service model, and a spec over a limit
exits 2 at render naming the request field."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudddp.backends.plugins import load_spec
from cloudddp.backends.sagemaker import SageMakerBackend
from cloudddp.backends.sagemaker.limits import (
    LIMITS,
    MAX_RUNTIME_SECONDS,
    Count,
    Number,
    Text,
    check,
    training_instance_types,
)
from cloudddp.errors import UserError
from tests.backends.sagemaker.jobs import EBS_CPU_JOB, SMDDP_JOB
from tests.support.cli import ROOT, cli

# Facets every value satisfies, so they need no check.
TRIVIAL_PATTERNS = {".*", ".+", "[\\S\\s]*"}


@functools.cache
def _model() -> Any:
    import botocore.session

    return botocore.session.get_session().get_service_model("sagemaker")


def _shape(path: str) -> Any:
    shape = _model().operation_model("CreateTrainingJob").input_shape
    for step in (s for s in re.split(r"\.|(\[\]|\{key\}|\{value\})", path) if s):
        if step == "[]":
            shape = shape.member
        elif step == "{key}":
            shape = shape.key
        elif step == "{value}":
            shape = shape.value
        else:
            shape = shape.members[step]
    return shape


@pytest.mark.parametrize("path", sorted(LIMITS))
def test_every_limit_equals_botocores_service_model(path: str) -> None:
    limit, meta = LIMITS[path], _shape(path).metadata
    if isinstance(limit, Text):
        assert (limit.min, limit.max, limit.pattern) == (meta.get("min", 0), meta["max"], meta["pattern"])
    elif isinstance(limit, Count):
        assert (limit.min, limit.max) == (meta.get("min", 0), meta["max"])
    else:
        assert isinstance(limit, Number)
        assert (limit.min, limit.max) == (meta.get("min", 0), meta.get("max"))


def test_limits_the_model_states_in_words_are_still_stated() -> None:
    stopping = _model().shape_for("StoppingCondition").members["MaxRuntimeInSeconds"].documentation
    assert "The maximum value is 28 days" in stopping and MAX_RUNTIME_SECONDS == 28 * 24 * 3600


def _constrained(shape: Any, value: Any, path: str) -> Iterator[str]:
    """Paths under ``value`` whose shape has a length/size/pattern limit some value could break. Enum
    members are not yielded: their values are cloudddp's constants or a catalog size, checked here."""
    meta = shape.metadata
    if shape.type_name == "string" and shape.enum:
        assert value in shape.enum, f"{path}: {value!r} is not one of the model's values"
    elif meta.get("min", 0) > 0 or "max" in meta or meta.get("pattern", ".*") not in TRIVIAL_PATTERNS:
        yield path
    if shape.type_name == "structure":
        for name, item in value.items():
            yield from _constrained(shape.members[name], item, f"{path}.{name}" if path else name)
    elif shape.type_name == "list":
        for item in value:
            yield from _constrained(shape.member, item, f"{path}[]")
    elif shape.type_name == "map":
        for key, item in value.items():
            yield from _constrained(shape.key, key, f"{path}{{key}}")
            yield from _constrained(shape.value, item, f"{path}{{value}}")


def test_every_limited_member_a_rendered_request_carries_is_checked() -> None:
    """Render the example jobs and one with every optional SageMaker field: each member they send that has
    a limit in the model is in LIMITS, and each enum member holds one of the model's values."""
    shape = _model().operation_model("CreateTrainingJob").input_shape
    jobs = [load_spec(p) for p in sorted((ROOT / "jobs").glob("*.yaml")) if load_spec(p).section("sagemaker").role]
    jobs.append(
        load_spec(
            SMDDP_JOB,
            [
                "resources.spot=false",
                "sagemaker.keep_alive=600",
                *EBS_CPU_JOB,
                "sagemaker.volume_kms_key=alias/k",
                "sagemaker.output_kms_key=alias/k",
                "sagemaker.subnets=[subnet-1]",
                "sagemaker.security_group_ids=[sg-1]",
                "sagemaker.volume_gb=100",
                "sagemaker.max_wait=5h",
            ],
        )
    )
    seen: set[str] = set()
    for spec in jobs:
        seen |= set(_constrained(shape, SageMakerBackend().render(spec).request, ""))
    assert "VpcConfig.Subnets[]" in seen and "ResourceConfig.KeepAlivePeriodInSeconds" in seen
    missing = seen - set(LIMITS)
    assert not missing, f"members with a limit in the model but no check in limits.py: {sorted(missing)}"


def _render(*overrides: str) -> Any:
    args = [a for o in overrides for a in (("-o", o) if o != "--json" else (o,))]
    return cli("render", str(SMDDP_JOB), "-b", "sagemaker", *args)


def _pairs(n: int, prefix: str, value: str = "v") -> str:
    return "{" + ", ".join(f"{prefix}{i}: {value}" for i in range(n)) + "}"


OVER_THE_LIMIT = {
    "code channel uri length": (  # the code arrives as the 'code' channel under the prefix
        ["sagemaker.prefix=" + "p" * 2500],
        "InputDataConfig['code'].DataSource.S3DataSource.S3Uri",
        "at most 1024",
    ),
    "environment count": (["env=" + _pairs(100, "E")], "Environment: 1", "at most 100"),
    "environment key length": ([f"env.{'K' * 513}=v"], "Environment key", "at most 512"),
    "environment value length": (["env.BIG=" + "v" * 513], "Environment['BIG']", "at most 512"),
    "tag count": (["tags=" + _pairs(49, "t")], "Tags: 5", "at most 50"),
    "tag key length": ([f"tags.{'k' * 129}=v"], "Tags[", "at most 128"),
    "tag value length": (["sagemaker.tags.team=" + "v" * 257], "Tags['team'].Value", "at most 256"),
    "tag key character": (["tags.te#am=v"], "Tags['te#am'].Key", "does not match"),
    "reserved tag prefix": (["tags.AWS:owner=v"], "Tags key 'AWS:owner'", "reserved for AWS"),
    "role pattern": (["sagemaker.role=arn:aws:iam::1:role/r"], "RoleArn", "does not match"),
    "image length": (["sagemaker.image=" + "i" * 256], "AlgorithmSpecification.TrainingImage", "at most 255"),
    "subnet count": (
        [
            "sagemaker.subnets=[" + ", ".join(f"subnet-{i}" for i in range(17)) + "]",
            "sagemaker.security_group_ids=[sg-1]",
        ],
        "VpcConfig.Subnets: 17",
        "at most 16",
    ),
    "security group pattern": (
        ["sagemaker.subnets=[subnet-1]", "sagemaker.security_group_ids=['sg 1']"],
        "VpcConfig.SecurityGroupIds[0]",
        "does not match",
    ),
    "kms key pattern": (
        [*EBS_CPU_JOB, "sagemaker.volume_kms_key=alias/my key"],
        "ResourceConfig.VolumeKmsKeyId",
        "does not match",
    ),
    "input uri length": (["inputs.train.path=s3://bucket/" + "d" * 1100], "S3Uri", "at most 1024"),
    "channel count": (
        # 20 inputs and the code channel
        ["inputs=" + "{" + ", ".join(f"c{i}: {{path: 's3://b/c{i}/'}}" for i in range(20)) + "}"],
        "InputDataConfig: 21",
        "at most 20",
    ),
}


@pytest.mark.parametrize("case", sorted(OVER_THE_LIMIT))
def test_a_spec_over_a_limit_exits_2_at_render_naming_the_field(case: str) -> None:
    overrides, field, limit = OVER_THE_LIMIT[case]
    result = _render(*overrides)
    assert result.returncode == 2, result.stdout[-500:] + result.stderr
    assert field in result.stderr and limit in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_warm_pool_with_spot_is_refused_with_the_reason() -> None:
    result = _render("sagemaker.keep_alive=600")
    assert result.returncode == 2
    assert "warm pools cannot be used with spot instances" in result.stderr and "resources.spot" in result.stderr
    assert _render("sagemaker.keep_alive=600", "resources.spot=false").returncode == 0


def test_a_program_too_long_for_100_hyperparameters_exits_2(tmp_path: Path) -> None:
    """The launcher's payload (argv + environment) travels in hyperparameters of at most 2500 characters
    each: an argv of ~300 kB needs more than SageMaker's 100."""
    job = yaml.safe_load(SMDDP_JOB.read_text())
    job["code"]["dir"] = str(ROOT / "src_train")
    job["code"]["args"] = [f"--a{i}={'x' * 3000}" for i in range(100)]
    spec = tmp_path / "long-argv.yaml"
    spec.write_text(yaml.safe_dump(job))
    result = cli("render", str(spec), "-b", "sagemaker")
    assert result.returncode == 2, result.stderr
    assert re.search(r"HyperParameters: 1\d\d entries; .* at most 100", result.stderr), result.stderr


def test_the_smddp_job_renders_at_its_limits() -> None:
    """Exactly at a limit passes: 100 Environment entries in all, a 512-character value, 50 tags in all."""
    plan = SageMakerBackend().render(load_spec(SMDDP_JOB))
    own_env, own_tags = len(plan.request["Environment"]), len(plan.request["Tags"])
    env = "{" + ", ".join([f"E{i}: v" for i in range(100 - own_env - 1)] + ["BIG: " + "v" * 512]) + "}"
    result = _render(f"env={env}", "tags=" + _pairs(50 - own_tags, "t"), "--json")
    assert result.returncode == 0, result.stderr
    request = json.loads(result.stdout)["request"]
    assert len(request["Environment"]) == 100 and len(request["Tags"]) == 50


def _request() -> dict[str, Any]:
    return json.loads(json.dumps(SageMakerBackend().render(load_spec(SMDDP_JOB)).request))


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("TrainingJobName", "-starts-with-a-dash", "TrainingJobName"),
        ("TrainingJobName", "n" * 64, "at most 63"),
        ("HyperParameters", {"k" * 257: "1"}, "HyperParameters key"),
    ],
)
def test_limits_a_spec_cannot_reach_are_still_checked(field: str, value: Any, named: str) -> None:
    request = _request()
    request[field] = value
    with pytest.raises(UserError, match=re.escape(named)):
        check(request)


def test_runtime_over_28_days_is_refused() -> None:
    request = _request()
    request["StoppingCondition"]["MaxRuntimeInSeconds"] = MAX_RUNTIME_SECONDS + 1
    with pytest.raises(UserError, match="28 days"):
        check(request)
    request["StoppingCondition"]["MaxRuntimeInSeconds"] = MAX_RUNTIME_SECONDS
    check(request)


def test_unicode_letters_and_spaces_are_valid_in_tags() -> None:
    request = _request()
    request["Tags"].append({"Key": "équipe ml", "Value": "données: 日本 = 1+1 @ /x_y.z-w"})
    check(request)


def test_the_training_instance_types_are_botocores_enum() -> None:
    """Equal to the enum of the botocore the data was taken from; a newer botocore (a fresh venv) may list types
    AWS added since: those are named in a warning (refresh the data), and none of ours may have gone."""
    import warnings

    import botocore

    enum = set(_model().shape_for("TrainingInstanceType").enum)
    ours = set(training_instance_types())
    data = json.loads((ROOT / "cloudddp" / "data" / "sagemaker_training_instance_types.json").read_text())
    taken_from = tuple(int(p) for p in re.findall(r"botocore (\d+)\.(\d+)\.(\d+)", data["source"])[0])
    installed = tuple(int(p) for p in botocore.__version__.split(".")[:3])
    assert ours <= enum, f"types botocore {botocore.__version__} no longer lists: {sorted(ours - enum)}"
    if installed == taken_from:
        assert ours == enum
    elif enum - ours:
        warnings.warn(
            f"botocore {botocore.__version__} lists newer training types: {sorted(enum - ours)}", stacklevel=1
        )


def test_a_mistyped_instance_type_exits_2_at_render_naming_the_closest_type() -> None:
    result = cli(
        "render",
        str(SMDDP_JOB),
        "-b",
        "sagemaker",
        "-o",
        "sagemaker.instance_type=ml.c5.xlarg",
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "'ml.c5.xlarg' is not a SageMaker training instance type; did you mean 'ml.c5.xlarge'?" in result.stderr
