"""Sending a SageMaker plan: the account bound where the plan left it late, the content-addressed snapshots
uploaded (skipping what is already there, :mod:`.storage`), the secrets revealed into the request that is sent
(never into the plan), then CreateTrainingJob. The job's name is deterministic, so a retried launch, or a retry
whose first CreateTrainingJob went through with its response lost, finds the job instead of creating a second.
"""

from __future__ import annotations

from typing import Any

from cloudddp.backends.base import Launched, Progress
from cloudddp.backends.sagemaker import storage
from cloudddp.backends.sagemaker.client import AwsClients
from cloudddp.backends.sagemaker.limits import LIMITS, Text
from cloudddp.backends.sagemaker.record import SageMakerRunInfo
from cloudddp.backends.sagemaker.request import encode, shim_hyperparameters, shim_payload
from cloudddp.backends.sagemaker.target import SageMakerTarget
from cloudddp.errors import UserError
from cloudddp.plan import Plan


def send(plan: Plan[dict[str, Any], SageMakerTarget], clients: AwsClients, progress: Progress | None) -> Launched:
    """The plan's training job created (or found), and what its run record keeps."""
    region = plan.target.region
    values = {}
    if "ACCOUNT" in plan.late:
        values["ACCOUNT"] = clients.account(region)
    bound = plan.bind(values)
    s3 = clients.client("s3", region)
    uploaded = [storage.upload(s3, up, region, progress) for up in bound.uploads]
    request = dict(bound.request, Environment=bound.reveal(bound.request["Environment"]))
    check_revealed_environment(request["Environment"], bound.request["Environment"])
    request["HyperParameters"] = revealed_launcher(bound.request["HyperParameters"], bound.reveal)
    name = create(clients.client("sagemaker", region), request, progress)
    return Launched(name, SageMakerRunInfo(region=region, uploaded_bytes=tuple(uploaded)).to_dict())


def check_revealed_environment(revealed: dict[str, str], rendered: dict[str, str]) -> None:
    """The Environment limits (:mod:`.limits`) on the real values of secrets, which render saw only as
    placeholders: SageMaker refuses a longer value with a ValidationException that may echo it, so it is refused
    here, naming the variable and never the value."""
    value_limit = LIMITS["Environment{value}"]
    for name, value in revealed.items():
        if value != rendered.get(name) and isinstance(value_limit, Text) and len(value) > value_limit.max:
            raise UserError(
                f"env.{name}: the secret's value has {len(value)} characters; SageMaker takes at most "
                f"{value_limit.max} in a job's environment (the value is not shown)",
                hint="pass a reference instead (an S3 URI, a Secrets Manager ARN the script reads)",
            )


def revealed_launcher(hyper: dict[str, str], reveal: Any) -> dict[str, str]:
    """The hyperparameters with the launcher's payload holding the ``from_env`` values of the submitting
    shell (its environment has no secrets: they go only in ``Environment``), to send only; the plan keeps
    the placeholders. The payload is base64, where the placeholders cannot be substituted as text."""
    payload = shim_payload(hyper)
    revealed = reveal(payload)
    if revealed == payload:
        return hyper
    rest = {k: v for k, v in hyper.items() if not k.startswith("cloudddp-")}
    return {**encode(shim_hyperparameters(revealed)), **rest}


def create(sm: Any, request: dict[str, Any], progress: Progress | None) -> str:
    """CreateTrainingJob, once: a job of this name that exists already is this plan's."""
    from botocore.exceptions import ClientError

    name: str = request["TrainingJobName"]
    if exists(sm, name):  # launched before (a retried submit): never a second job
        if progress:
            progress.step(f"training job {name} already exists: not creating it again")
        return name
    try:
        sm.create_training_job(**request)
    except ClientError as e:
        # A retry whose first attempt went through (response lost) meets its own job: that is success.
        if e.response["Error"].get("Code") not in ("ResourceInUse", "ValidationException") or not exists(sm, name):
            raise
    if progress:
        progress.step(f"created training job {name}")
    return name


def exists(sm: Any, name: str) -> bool:
    from botocore.exceptions import ClientError

    try:
        sm.describe_training_job(TrainingJobName=name)
        return True
    except ClientError:
        return False
