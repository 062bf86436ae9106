"""The SageMaker backend: a CreateTrainingJob for an official PyTorch container, torchrun or smddp.

``render`` needs neither network nor credentials nor boto3. ``launch`` uploads the content-addressed
code and data snapshots (skipping what is already there), then creates the job; a retry after a lost
response finds the job by its deterministic name instead of creating a second one. Logs come from
CloudWatch Logs (every ``algo-N`` host), metrics from the same lines.

Its modules: the ``sagemaker:`` section (``options.py``); the render: its choices (``decide.py``), the
CreateTrainingJob request (``request.py``) and the plan's lines (``explain.py``), with what they draw on: the
official images (``images.py``), instance types the catalog lacks (``hardware.py``), EFA (``efa.py``), smddp for
an own script (``smddp.py``), and what SageMaker refuses or ignores, checked at render (``limits.py``,
``argsize.py``, ``volumes.py``); S3 and the snapshots (``storage.py``); the preflight's quotas (``quotas.py``); logs
(``logs.py``); the bill (``bill.py``); the plan's target: the region and the checkpoint folder (``target.py``), and
that folder in S3 as a store (``checkpoint_store.py``).
"""

from __future__ import annotations

import datetime
import json
import os
import time
from collections.abc import Iterator
from typing import Any, ClassVar

from cloudddp.backends.base import Launched, Progress
from cloudddp.backends.checks import Check, MissingSetting
from cloudddp.backends.features import Capabilities, Feature
from cloudddp.backends.sagemaker import storage
from cloudddp.backends.sagemaker.bill import training_bill
from cloudddp.backends.sagemaker.checkpoint_store import S3Checkpoints
from cloudddp.backends.sagemaker.decide import ACCOUNT, Storage, decide
from cloudddp.backends.sagemaker.explain import explain
from cloudddp.backends.sagemaker.limits import LIMITS, Text
from cloudddp.backends.sagemaker.logs import host_line
from cloudddp.backends.sagemaker.options import SageMakerOptions
from cloudddp.backends.sagemaker.quotas import quota_check
from cloudddp.backends.sagemaker.request import build, encode, shim_hyperparameters, shim_payload
from cloudddp.backends.sagemaker.target import SageMakerTarget
from cloudddp.backends.sized import SizedBackend
from cloudddp.backends.status import Cause, LogLine, RunState, RunStatus
from cloudddp.catalog.bill import Bill
from cloudddp.catalog.target import SizeTarget
from cloudddp.errors import BackendUnavailable, CloudDDPError, UserError
from cloudddp.plan import Plan
from cloudddp.spec.model import JobSpec
from cloudddp.spec.secrets import redacted_spec_data

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
POLL_SECONDS = float(os.environ.get("CLOUDDDP_SAGEMAKER_POLL", "5"))
CREDENTIALS_FIX = "run `aws configure` (or `aws sso login`), or export AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
_AUTH_CODES = {
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "SignatureDoesNotMatch",
    "AccessDenied",
    "AccessDeniedException",
    "InvalidAccessKeyId",
}
_NOT_FOUND = ("Requested resource not found", "Could not find", "does not exist")
_STATES = {
    "InProgress": RunState.RUNNING,
    "Completed": RunState.SUCCEEDED,
    "Failed": RunState.FAILED,
    "Stopping": RunState.STOPPING,
    "Stopped": RunState.CANCELLED,
}
_TIME_LIMITS = {  # SecondaryStatus of a job SageMaker stopped at its StoppingCondition
    "MaxRuntimeExceeded": "stopped at its time limit: MaxRuntimeExceeded (limits.max_runtime)",
    "MaxWaitTimeExceeded": "stopped at its time limit: MaxWaitTimeExceeded (managed spot waited and ran longer than "
    "sagemaker.max_wait)",
}
_STARTING = {
    "Starting",
    "LaunchingMLInstances",
    "PreparingTrainingStack",
    "Downloading",
    "DownloadingTrainingImage",
    "Pending",
    "Restarting",
}


_CAUSES = (  # FailureReason starts with the error's kind (DescribeTrainingJob)
    ("CapacityError", Cause.CAPACITY),
    ("InsufficientCapacity", Cause.CAPACITY),
    ("InternalServerError", Cause.INFRASTRUCTURE),
    ("InternalFailure", Cause.INFRASTRUCTURE),
    ("AlgorithmError", Cause.USER_ERROR),
    ("ClientError", Cause.USER_ERROR),
)


def failure_cause(reason: str) -> Cause:
    """Why a training job failed, from its FailureReason (``CapacityError: ...``, ``AlgorithmError: ...``)."""
    if "MaxRuntimeInSeconds" in reason or reason.startswith("MaxRuntimeExceeded"):
        return Cause.LIMIT
    return next((cause for prefix, cause in _CAUSES if reason.startswith(prefix)), Cause.UNKNOWN)


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


EXAMPLE_ACCOUNT = "111122223333"  # AWS's documentation account
ROLE_STAND_IN = "arn:aws:iam::000000000000:role/not-set-give-sagemaker.role"
"""What ``plan`` puts where the role goes when the spec has none: sizes rank without it; a submit needs one."""


SageMakerPlan = Plan[dict[str, Any], SageMakerTarget]


class SageMakerBackend(SizedBackend[SageMakerOptions]):
    name: ClassVar[str] = "sagemaker"
    description: ClassVar[str] = "SageMaker training job on an official PyTorch container (torchrun or smddp)"
    options_model = SageMakerOptions
    target_type = SageMakerTarget
    cloud: ClassVar[str | None] = "aws"
    sigterm_grace: ClassVar[int] = 120  # StopTrainingJob: SIGTERM, then 120 s (SageMaker API reference)
    spend_while_running: ClassVar[bool] = True  # TrainingStartTime × instances × price, while the job runs
    capabilities: ClassVar[Capabilities] = Capabilities(
        unsupported={
            Feature.PROVISION: "SageMaker starts the instances of each job itself; there is no cluster to create "
            "or leave alone",
        },
        caveats={
            Feature.SECRET_ENV: "CreateTrainingJob has no secret-safe field: secrets go in Environment at submit and "
            "are visible to DescribeTrainingJob callers; prefer AWS Secrets Manager for real secrets",
        },
    )

    def __init__(
        self, session: Any = None, *, poll_seconds: float = POLL_SECONDS, token: str | None = None, **base: Any
    ) -> None:
        super().__init__(**base)
        self._session = session
        self.poll_seconds = poll_seconds
        self.token = token

    def _size_target(self, spec: JobSpec) -> SizeTarget:
        return SizeTarget("aws", self.options(spec).instance_type, "sagemaker.instance_type")

    cpu_size_example = ("ml.c5.2xlarge", "ml.c5.2xlarge has 8 vCPUs, ml.m5.4xlarge 16 and more memory")

    def _missing_settings(self, spec: JobSpec) -> list[MissingSetting]:
        sm = self.options(spec)
        missing = []
        if not (sm.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")):
            missing.append(MissingSetting("sagemaker.region", "the AWS region to train in", "us-east-1", "AWS_REGION"))
        if not (sm.role or os.environ.get("CLOUDDDP_SAGEMAKER_ROLE")):
            missing.append(
                MissingSetting(
                    "sagemaker.role",
                    "the IAM role SageMaker runs the job as, with SageMaker access and read/write on the bucket",
                    f"arn:aws:iam::{EXAMPLE_ACCOUNT}:role/SageMakerRole",
                    "CLOUDDDP_SAGEMAKER_ROLE",
                    stand_in=ROLE_STAND_IN,
                )
            )
        return missing + super()._missing_settings(spec)

    # -- render ------------------------------------------------------------------------------
    def _render(self, spec: JobSpec) -> SageMakerPlan:
        token = self.token or time.strftime("%y%m%d%H%M%S")
        decision = decide(spec, self.options(spec), self._size_target(spec), self.sigterm_grace)
        request = build(decision, token)
        decisions, warnings = explain(decision)
        return Plan(
            backend=self.name,
            job_name=request["TrainingJobName"],
            request=request,
            documents={"CreateTrainingJob.json": json.dumps(request, indent=2) + "\n"},
            decisions=decisions,
            warnings=warnings,
            estimate=decision.size.estimate,
            uploads=list(decision.storage.uploads),
            target=self._target(decision.region, decision.storage if spec.checkpoint.enabled else None),
            job=redacted_spec_data(spec),
            late=("ACCOUNT",) if ACCOUNT in json.dumps(request) else (),
            env_sources=decision.launch.env_sources,
        )

    @staticmethod
    def _target(region: str, checkpoints: Storage | None) -> SageMakerTarget:
        """The region; with checkpoints, their folder and what a write there carries: the default bucket's owner
        check (the account, bound at launch), the spec's KMS key."""
        if checkpoints is None:
            return SageMakerTarget(region=region)
        return SageMakerTarget(
            region=region,
            checkpoints=checkpoints.checkpoint_uri,
            bucket_owner=ACCOUNT if checkpoints.default_bucket else None,
            kms_key=checkpoints.kms_key or None,
        )

    def _checkpoint_store(self, location: str, target: SageMakerTarget) -> S3Checkpoints:
        """The checkpoint folder in S3; the default bucket's account (late-bound in a plan and its run's record)
        from STS, as a launch binds it."""
        region, owner = target.region, target.bucket_owner
        if ACCOUNT in location or ACCOUNT in str(owner or ""):
            account = self._client("sts", region).get_caller_identity()["Account"]
            location, owner = location.replace(ACCOUNT, account), str(owner or "").replace(ACCOUNT, account)
        return S3Checkpoints(
            self._client("s3", region),
            location,
            region=region,
            owner=str(owner) if owner else None,
            kms_key=target.kms_key,
            translate=self._translate,
        )

    def _for_attempt(self, plan: Plan, attempt: int) -> Plan:
        """Training job names are unique: the attempt gets ``-rN`` (and a ``cloudddp:attempt`` tag)."""

        suffix = f"-r{attempt}"
        base = plan.job_name.removesuffix(f"-r{attempt - 1}") if attempt > 2 else plan.job_name
        name = base[: 63 - len(suffix)] + suffix
        hyper = plan.request["HyperParameters"]
        parts = sorted(k for k in hyper if k.startswith("cloudddp-"))
        payload = shim_payload(hyper)  # whole, so the name is found whole
        again = plan.renamed(name)
        rest = {k: v for k, v in again.request["HyperParameters"].items() if k not in parts}
        launcher = encode(shim_hyperparameters(json.loads(json.dumps(payload).replace(plan.job_name, name))))
        again.request["HyperParameters"] = {**launcher, **rest}
        tags = [t for t in again.request["Tags"] if t["Key"] != "cloudddp:attempt"]
        again.request["Tags"] = [*tags, {"Key": "cloudddp:attempt", "Value": str(attempt)}]
        return again

    # -- AWS clients (boto3 imported here, never at render) ----------------------------------------
    def _boto(self, region: str) -> Any:
        if self._session is None:
            try:
                import boto3
            except ImportError:
                raise BackendUnavailable("the SageMaker backend needs boto3: pip install 'cloudddp[aws]'") from None
            self._session = boto3.session.Session(region_name=region)
        return self._session

    def _client(self, service: str, region: str, attempts: int = 8) -> Any:
        from botocore.config import Config

        config = Config(retries={"mode": "standard", "max_attempts": attempts}, user_agent_extra="cloudddp")
        return self._boto(region).client(service, region_name=region, config=config)

    def _region_of(self, run_id: str) -> str:
        record = self.records.get(run_id)
        if record and record.info.get("region"):
            return str(record.info["region"])
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if not region:
            raise UserError(f"cannot tell the region of {run_id}: set AWS_REGION")
        return region

    def _translate(self, error: Exception) -> CloudDDPError | None:
        """botocore's errors, in one place: credentials and permissions exit 2 with the fix."""
        from botocore.exceptions import (
            ClientError,
            EndpointConnectionError,
            NoCredentialsError,
            NoRegionError,
            PartialCredentialsError,
            TokenRetrievalError,
        )

        if isinstance(error, (NoCredentialsError, PartialCredentialsError, TokenRetrievalError)):
            return BackendUnavailable(f"no usable AWS credentials: {error}", hint=CREDENTIALS_FIX)
        if isinstance(error, NoRegionError):
            return UserError("no AWS region: set sagemaker.region in the spec, or AWS_REGION")
        if isinstance(error, EndpointConnectionError):
            return CloudDDPError(f"cannot reach AWS: {error}")
        if isinstance(error, ClientError):
            code = error.response.get("Error", {}).get("Code", "")
            message = error.response.get("Error", {}).get("Message", str(error))
            if code in _AUTH_CODES:
                return BackendUnavailable(f"AWS refused these credentials ({code}): {message}", hint=CREDENTIALS_FIX)
            return CloudDDPError(f"SageMaker refused the request ({code}): {message}")
        return None

    # -- launch ------------------------------------------------------------------------------
    def _launch(self, plan: SageMakerPlan, *, provision: bool, progress: Progress | None) -> Launched:
        region = plan.target.region
        values = {}
        if "ACCOUNT" in plan.late:
            values["ACCOUNT"] = self._client("sts", region).get_caller_identity()["Account"]
        bound = plan.bind(values)
        s3 = self._client("s3", region)
        uploaded = [storage.upload(s3, up, region, progress) for up in bound.uploads]
        request = dict(bound.request, Environment=bound.reveal(bound.request["Environment"]))
        check_revealed_environment(request["Environment"], bound.request["Environment"])
        request["HyperParameters"] = revealed_launcher(bound.request["HyperParameters"], bound.reveal)
        name = self._create(self._client("sagemaker", region), request, progress)
        return Launched(name, {"region": region, "uploaded_bytes": uploaded})

    def _create(self, sm: Any, request: dict[str, Any], progress: Progress | None) -> str:
        from botocore.exceptions import ClientError

        name: str = request["TrainingJobName"]
        if self._exists(sm, name):  # launched before (a retried submit): never a second job
            if progress:
                progress.step(f"training job {name} already exists: not creating it again")
            return name
        try:
            sm.create_training_job(**request)
        except ClientError as e:
            # A retry whose first attempt went through (response lost) meets its own job: that is success.
            if e.response["Error"].get("Code") not in ("ResourceInUse", "ValidationException") or not self._exists(
                sm, name
            ):
                raise
        if progress:
            progress.step(f"created training job {name}")
        return name

    @staticmethod
    def _exists(sm: Any, name: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            sm.describe_training_job(TrainingJobName=name)
            return True
        except ClientError:
            return False

    # -- run verbs ---------------------------------------------------------------------------
    def _describe_job(self, run_id: str) -> dict[str, Any] | None:
        """DescribeTrainingJob, or None when there is no such job."""
        from botocore.exceptions import ClientError

        try:
            found: dict[str, Any] = self._client("sagemaker", self._region_of(run_id)).describe_training_job(
                TrainingJobName=run_id
            )
        except ClientError as e:
            message = e.response.get("Error", {}).get("Message", "")
            if e.response.get("Error", {}).get("Code") in ("ValidationException", "ResourceNotFound") and any(
                s in message for s in _NOT_FOUND
            ):
                return None
            raise
        return found

    def _describe(self, run_id: str) -> RunStatus | None:
        d = self._describe_job(run_id)
        if d is None:
            return None
        native, secondary = d.get("TrainingJobStatus", ""), d.get("SecondaryStatus", "")
        state = _STATES.get(native, RunState.UNKNOWN)
        if state is RunState.RUNNING and secondary in _STARTING:
            state = RunState.STARTING
        created, ended = d.get("CreationTime"), d.get("TrainingEndTime")
        cause = (
            failure_cause(d.get("FailureReason") or "")
            if state is RunState.FAILED
            else (Cause.CANCELLED if state is RunState.CANCELLED else None)
        )
        message = d.get("FailureReason") or secondary
        if native == "Stopped" and secondary in _TIME_LIMITS:  # stopped at a StoppingCondition: a limit, no cancel
            state, cause, message = RunState.FAILED, Cause.LIMIT, _TIME_LIMITS[secondary]
        return RunStatus(
            run_id=run_id,
            backend=self.name,
            state=state,
            name=run_id.rsplit("-", 2)[0],
            native_state=f"{native}/{secondary}" if secondary else native,
            message=message,
            created_at=created.timestamp() if isinstance(created, datetime.datetime) else None,
            ended_at=ended.timestamp() if isinstance(ended, datetime.datetime) else None,
            details={
                "instance_type": d.get("ResourceConfig", {}).get("InstanceType"),
                "instance_count": d.get("ResourceConfig", {}).get("InstanceCount"),
                "billable_seconds": d.get("BillableTimeInSeconds"),
            },
            cause=cause,
        )

    def _log_iter(self, run_id: str, *, follow: bool) -> Iterator[LogLine]:
        """Every ``<job>/algo-N-*`` stream, interleaved by time, each line tagged with its rank (:func:`host_line`)."""
        from botocore.exceptions import ClientError

        logs = self._client("logs", self._region_of(run_id))
        tokens: dict[str, str | None] = {}
        instances = int(self.status(run_id).details.get("instance_count") or 1)
        while True:
            finished = self.status(run_id).state.terminal if follow else True
            try:  # 50 streams a page: a job of more hosts (or restarts: a stream each) needs the next pages
                pages = logs.get_paginator("describe_log_streams").paginate(
                    logGroupName=LOG_GROUP, logStreamNamePrefix=f"{run_id}/"
                )
                streams = [stream for page in pages for stream in page["logStreams"]]
            except ClientError as e:
                if e.response["Error"].get("Code") != "ResourceNotFoundException":
                    raise
                streams = []
            batch = []
            for stream in streams:
                name = stream["logStreamName"]
                host = name.split("/", 1)[1].rsplit("-", 1)[0] if "/" in name else name
                while True:
                    kwargs: dict[str, Any] = {"logGroupName": LOG_GROUP, "logStreamName": name, "startFromHead": True}
                    if tokens.get(name):
                        kwargs["nextToken"] = tokens[name]
                    page = logs.get_log_events(**kwargs)
                    batch += [(e["timestamp"], host, e["message"]) for e in page["events"]]
                    done = page.get("nextForwardToken") == tokens.get(name) or not page["events"]
                    tokens[name] = page.get("nextForwardToken")
                    if done:
                        break
            for ts, host, message in sorted(batch, key=lambda x: (x[0], x[1])):
                for line in message.splitlines() or [""]:
                    yield host_line(host, line, ts / 1000, hosts=instances)
            if finished:
                return
            time.sleep(self.poll_seconds)

    def _cancel(self, run_id: str) -> None:
        self._client("sagemaker", self._region_of(run_id)).stop_training_job(TrainingJobName=run_id)

    def _bill(self, run_id: str) -> Bill | None:
        """The bill from DescribeTrainingJob's times (:mod:`cloudddp.backends.sagemaker.bill`)."""
        d = self._describe_job(run_id)
        return None if d is None else training_bill(d)

    def _preflight(self, plan: SageMakerPlan) -> list[Check]:
        """Credentials, the inputs in S3 and the instance type's quota (Service Quotas)."""
        region = plan.target.region
        checks = []
        try:
            identity = self._client("sts", region).get_caller_identity()
            checks.append(Check("AWS credentials", True, f"account {identity['Account']}"))
        except Exception as e:  # noqa: BLE001 - any failure here means "no usable credentials"
            return [Check("AWS credentials", False, str(e).splitlines()[0], fix=CREDENTIALS_FIX)]
        s3 = self._client("s3", region, attempts=2)
        for channel in plan.request.get("InputDataConfig", []):
            uri = channel["DataSource"]["S3DataSource"]["S3Uri"]
            if any(u["destination"] == uri for u in plan.uploads):
                continue  # uploaded by submit itself
            bucket, _, prefix = uri.removeprefix("s3://").partition("/")
            try:
                found = s3.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1).get("KeyCount", 0) > 0
                checks.append(
                    Check(
                        f"input {channel['ChannelName']} reachable",
                        found,
                        uri if found else f"nothing under {uri}",
                        fix="upload the data there, or fix inputs.<name>",
                    )
                )
            except Exception as e:  # noqa: BLE001
                checks.append(
                    Check(
                        f"input {channel['ChannelName']} reachable",
                        False,
                        f"{uri}: {str(e).splitlines()[0]}",
                        fix="check the URI and that these credentials may read it",
                    )
                )
        itype = plan.request["ResourceConfig"]["InstanceType"]
        count = plan.request["ResourceConfig"]["InstanceCount"]
        spot = bool(plan.request.get("EnableManagedSpotTraining"))
        checks.append(quota_check(self._client("service-quotas", region, attempts=2), itype, count, spot))
        return checks


__all__ = ["LOG_GROUP", "SageMakerBackend", "SageMakerOptions"]
