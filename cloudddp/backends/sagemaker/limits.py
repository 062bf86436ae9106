"""CreateTrainingJob's hard limits, checked at render so that SageMaker never rejects what cloudddp sends.

``LIMITS`` holds, per member path of the CreateTrainingJob input shape, the ``min``/``max``/``pattern``
of botocore's service model (``data/sagemaker/2017-07-24/service-2.json``, botocore 1.44.5). They are
constants here because render must not import botocore; ``tests/backends/sagemaker/test_limits.py``
reads the model and asserts that every one equals the model's value, so a change in AWS's model fails a
test instead of a launch. Paths: ``a.b`` a member, ``a[]`` each list item, ``a{key}``/``a{value}`` each
map key/value. ``check`` walks a finished request and raises a :class:`UserError` (exit 2) that names the
field, the limit and the spec field that feeds it.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from cloudddp.errors import UserError
from cloudddp.paths import data_text

TYPES_FILE = "sagemaker_training_instance_types.json"


@dataclass(frozen=True)
class Text:
    """A string's length bounds and the pattern the whole string must match."""

    min: int
    max: int
    pattern: str


@dataclass(frozen=True)
class Count:
    """How many items a list or entries a map may have."""

    min: int
    max: int


@dataclass(frozen=True)
class Number:
    """An integer's bounds (None: no upper bound in the model)."""

    min: int
    max: int | None = None


Limit = Text | Count | Number

S3_URI = Text(0, 1024, r"(https|s3)://([^/]+)/?(.*)")
KMS_KEY = Text(0, 2048, r"[a-zA-Z0-9:/_-]*")
VPC_ID = Text(0, 32, r"[-0-9a-zA-Z]+")
TAG_PATTERN = r"([\p{L}\p{Z}\p{N}_.:/=+\-@]*)"

LIMITS: dict[str, Limit] = {
    "TrainingJobName": Text(1, 63, r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}"),
    "RoleArn": Text(20, 2048, r"arn:aws[a-z\-]*:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+"),
    "AlgorithmSpecification.TrainingImage": Text(0, 255, r".*"),
    "AlgorithmSpecification.ContainerEntrypoint": Count(1, 100),
    "AlgorithmSpecification.ContainerEntrypoint[]": Text(0, 256, r".*"),
    "AlgorithmSpecification.ContainerArguments": Count(1, 100),
    "AlgorithmSpecification.ContainerArguments[]": Text(0, 256, r".*"),
    "AlgorithmSpecification.MetricDefinitions": Count(0, 40),
    "AlgorithmSpecification.MetricDefinitions[].Name": Text(1, 255, r".+"),
    "AlgorithmSpecification.MetricDefinitions[].Regex": Text(1, 500, r".+"),
    "HyperParameters": Count(0, 100),
    "HyperParameters{key}": Text(0, 256, r".*"),
    "HyperParameters{value}": Text(0, 2500, r".*"),
    "InputDataConfig": Count(1, 20),
    "InputDataConfig[].ChannelName": Text(1, 64, r"[A-Za-z0-9\.\-_]+"),
    "InputDataConfig[].DataSource.S3DataSource.S3Uri": S3_URI,
    "OutputDataConfig.S3OutputPath": S3_URI,
    "OutputDataConfig.KmsKeyId": KMS_KEY,
    "ResourceConfig.InstanceCount": Number(0),
    "ResourceConfig.VolumeSizeInGB": Number(0),
    "ResourceConfig.VolumeKmsKeyId": KMS_KEY,
    "ResourceConfig.KeepAlivePeriodInSeconds": Number(0, 21600),
    "VpcConfig.SecurityGroupIds": Count(1, 5),
    "VpcConfig.SecurityGroupIds[]": VPC_ID,
    "VpcConfig.Subnets": Count(1, 16),
    "VpcConfig.Subnets[]": VPC_ID,
    "StoppingCondition.MaxRuntimeInSeconds": Number(1),
    "StoppingCondition.MaxWaitTimeInSeconds": Number(1),
    "Tags": Count(0, 50),
    "Tags[].Key": Text(1, 128, TAG_PATTERN),
    "Tags[].Value": Text(0, 256, TAG_PATTERN),
    "CheckpointConfig.S3Uri": S3_URI,
    "CheckpointConfig.LocalPath": Text(0, 4096, r".*"),
    "Environment": Count(0, 100),
    "Environment{key}": Text(0, 512, r"[a-zA-Z_][a-zA-Z0-9_]*"),
    "Environment{value}": Text(0, 512, r"[\S\s]*"),
    "RetryStrategy.MaximumRetryAttempts": Number(1, 30),
}

# Limits the model states only in its documentation (the tests check the sentences are still there).
MAX_RUNTIME_SECONDS = 28 * 24 * 3600  # StoppingCondition.MaxRuntimeInSeconds: "The maximum value is 28 days."
# Tag keys: "aws:" in any case is reserved for AWS (AWS's tagging rules; cloudddp/data/SOURCES.md).
RESERVED_TAG_PREFIX = "aws:"

# Where each top-level member comes from in a job spec: the hint of an error.
SPEC_FIELDS = {
    "TrainingJobName": "name",
    "RoleArn": "sagemaker.role (or CLOUDDDP_SAGEMAKER_ROLE)",
    "AlgorithmSpecification": "sagemaker.image",
    "HyperParameters": "code (the launcher's payload: argv and env, split in parts) and sagemaker.bucket/prefix",
    "InputDataConfig": "inputs",
    "OutputDataConfig": "outputs.model.path, sagemaker.bucket/prefix or sagemaker.output_kms_key",
    "ResourceConfig": "resources.nodes, resources.disk_gb, sagemaker.volume_gb, sagemaker.keep_alive "
    "or sagemaker.volume_kms_key",
    "VpcConfig": "sagemaker.subnets and sagemaker.security_group_ids",
    "StoppingCondition": "limits.max_runtime or sagemaker.max_wait",
    "Tags": "tags and sagemaker.tags",
    "CheckpointConfig": "checkpoint.path or sagemaker.bucket/prefix",
    "Environment": "env (cloudddp adds its own CLOUDDDP_* variables)",
    "RetryStrategy": "limits.max_restarts",
}


def _values(node: Any, steps: list[str], where: str) -> Iterator[tuple[str, Any]]:
    """(where, value) for every value at ``steps`` below ``node``; absent members yield nothing."""
    if not steps:
        yield where, node
        return
    step, rest = steps[0], steps[1:]
    if step == "[]":
        for i, item in enumerate(node if isinstance(node, list) else []):
            yield from _values(item, rest, f"{where}[{_item_label(item, i)}]")
    elif step in ("{key}", "{value}"):
        for key, value in node.items() if isinstance(node, Mapping) else []:
            label = f"{where} key {_short(key)!r}" if step == "{key}" else f"{where}[{_short(key)!r}]"
            yield from _values(key if step == "{key}" else value, rest, label)
    elif isinstance(node, Mapping) and step in node:
        yield from _values(node[step], rest, f"{where}.{step}" if where else step)


def _item_label(item: Any, index: int) -> str:
    """A list item by its name where it has one (a tag's key, a channel's name), else by its index."""
    name = item.get("Key", item.get("ChannelName", item.get("Name"))) if isinstance(item, Mapping) else None
    return str(index) if name is None else repr(_short(name))


def _short(value: Any, width: int = 40) -> str:
    text = str(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _steps(path: str) -> list[str]:
    return [s for s in re.split(r"\.|(\[\]|\{key\}|\{value\})", path) if s]


def _unicode_class_ok(pattern: str, text: str) -> bool:
    """``([\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*)`` (Java's Unicode classes, which Python's ``re`` lacks)."""
    body = re.fullmatch(r"\(\[(.*)\]\*\)", pattern)
    if body is None:
        raise ValueError(f"cannot read the pattern {pattern}")
    categories = re.findall(r"\\p\{(\w)\}", body.group(1))
    literals = re.sub(r"\\p\{\w\}", "", body.group(1)).replace("\\", "")
    return all(ch in literals or unicodedata.category(ch)[0] in categories for ch in text)


def _matches(pattern: str, text: str) -> bool:
    if "\\p{" in pattern:
        return _unicode_class_ok(pattern, text)
    return re.fullmatch(pattern, text, flags=re.ASCII) is not None


def _fail(path: str, message: str) -> UserError:
    top = _steps(path)[0]
    feeds = SPEC_FIELDS.get(top)
    return UserError(message, hint=f"{top} comes from the spec's {feeds}" if feeds else None)


def _check_one(path: str, limit: Limit, where: str, value: Any) -> None:
    if isinstance(limit, Count):
        n = len(value)
        if not limit.min <= n <= limit.max:
            bound = f"at most {limit.max}" if n > limit.max else f"at least {limit.min}"
            raise _fail(path, f"{where}: {n} entries; SageMaker's CreateTrainingJob allows {bound}")
    elif isinstance(limit, Number):
        if value < limit.min or (limit.max is not None and value > limit.max):
            raise _fail(
                path,
                f"{where}: {value} is outside SageMaker's limits "
                f"({limit.min} to {limit.max if limit.max is not None else 'unbounded'})",
            )
    else:
        text = str(value)
        shown = _short(text, 60)
        if not limit.min <= len(text) <= limit.max:
            bound = f"at most {limit.max}" if len(text) > limit.max else f"at least {limit.min}"
            raise _fail(path, f"{where}: {len(text)} characters ({shown!r}); SageMaker allows {bound}")
        if not _matches(limit.pattern, text):
            raise _fail(path, f"{where}: {shown!r} does not match SageMaker's pattern {limit.pattern}")


def check(request: Mapping[str, Any]) -> None:
    """Raise a :class:`UserError` for the first value of ``request`` outside a CreateTrainingJob limit."""
    for path, limit in LIMITS.items():
        for where, value in _values(request, _steps(path), ""):
            _check_one(path, limit, where, value)
    runtime = request.get("StoppingCondition", {}).get("MaxRuntimeInSeconds")
    if runtime is not None and runtime > MAX_RUNTIME_SECONDS:
        raise _fail(
            "StoppingCondition",
            f"StoppingCondition.MaxRuntimeInSeconds: {runtime} s; SageMaker allows "
            f"at most {MAX_RUNTIME_SECONDS} s (28 days)",
        )
    for tag in request.get("Tags", []):
        if str(tag.get("Key", "")).lower().startswith(RESERVED_TAG_PREFIX):
            raise _fail(
                "Tags", f"Tags key {tag['Key']!r}: the prefix {RESERVED_TAG_PREFIX!r} (in any case) is reserved for AWS"
            )


@functools.cache
def training_instance_types() -> tuple[str, ...]:
    """The instance types CreateTrainingJob accepts (botocore's ``TrainingInstanceType`` enum, kept as dated data
    in ``cloudddp/data/sagemaker_training_instance_types.json``; a test holds it equal to the installed botocore's)."""
    data = json.loads(data_text(TYPES_FILE))
    return tuple(data["types"])


def instance_type_problem(name: str) -> str | None:
    """Why ``name`` is no SageMaker training instance type, naming the closest real one; None when it is one."""
    known = training_instance_types()
    if name in known:
        return None
    guess = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
    tip = f"; did you mean '{guess[0]}'?" if guess else ""
    return (
        f"{name!r} is not a SageMaker training instance type{tip} (`cloudddp skus --backend sagemaker` ranks the "
        "types that fit the job)"
    )
