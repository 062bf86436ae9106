"""The SageMaker backend: a CreateTrainingJob for an official PyTorch container, torchrun or smddp.

``render`` needs neither network nor credentials nor boto3. ``launch`` uploads the content-addressed
code and data snapshots (skipping what is already there), then creates the job; a retry after a lost
response finds the job by its deterministic name instead of creating a second one. Logs come from
CloudWatch Logs (every ``algo-N`` host), metrics from the same lines.

Its modules: the ``sagemaker:`` section (``options.py``); the render: its choices (``decide.py``), the
CreateTrainingJob request (``request.py``) and the plan's lines (``explain.py``), with what they draw on: the
official images (``images.py``), instance types the catalog lacks (``hardware.py``), EFA (``efa.py``), smddp for an
own script (``smddp.py``), and what SageMaker refuses or ignores, checked at render (``limits.py``, ``argsize.py``,
``volumes.py``); the plan's target: the region and the checkpoint folder (``target.py``); boto3's clients and its
errors translated (``client.py``); the launch (``launch.py``) and S3 and the snapshots (``storage.py``); the run's
record (``record.py``); the preflight and its quotas (``preflight.py``, ``quotas.py``); status from
DescribeTrainingJob, a hang named from the log (``status.py``); logs (``logs.py``); the bill (``bill.py``); the
checkpoint folder in S3 as a store (``checkpoint_store.py``).
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Iterator
from typing import Any, ClassVar

from cloudddp.backends.base import Launched, Progress
from cloudddp.backends.checks import Check, MissingSetting
from cloudddp.backends.features import Capabilities, Feature
from cloudddp.backends.sagemaker.bill import training_bill
from cloudddp.backends.sagemaker.checkpoint_store import S3Checkpoints
from cloudddp.backends.sagemaker.client import AwsClients, translate
from cloudddp.backends.sagemaker.decide import ACCOUNT, Storage, decide
from cloudddp.backends.sagemaker.explain import explain
from cloudddp.backends.sagemaker.launch import send
from cloudddp.backends.sagemaker.logs import job_lines
from cloudddp.backends.sagemaker.options import SageMakerOptions
from cloudddp.backends.sagemaker.preflight import preflight
from cloudddp.backends.sagemaker.record import SageMakerRunInfo
from cloudddp.backends.sagemaker.request import build, encode, shim_hyperparameters, shim_payload, stacks_request
from cloudddp.backends.sagemaker.status import LOG_SETTLE_S, describe_job, job_status
from cloudddp.backends.sagemaker.target import SageMakerTarget
from cloudddp.backends.sized import SizedBackend
from cloudddp.backends.status import Cause, LogLine, RunState, RunStatus
from cloudddp.backends.verdicts import KeptVerdicts, concluding
from cloudddp.catalog.bill import Bill
from cloudddp.catalog.target import SizeTarget
from cloudddp.errors import CloudDDPError, UserError
from cloudddp.injob.culprit import Capture
from cloudddp.injob.stack_answers import requested
from cloudddp.plan import Plan
from cloudddp.spec.model import JobSpec
from cloudddp.spec.secrets import redacted_spec_data

POLL_SECONDS = float(os.environ.get("CLOUDDDP_SAGEMAKER_POLL", "5"))
STACKS_WAIT_S = float(os.environ.get("CLOUDDDP_STACKS_WAIT_S", "45"))
"""How long ``cloudddp stacks`` waits for the hosts' answers in the log: their poll (10 s), CloudWatch Logs'
delivery, this backend's own poll of the streams."""
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
        self._clients = AwsClients(session)
        self.poll_seconds = poll_seconds
        self.token = token
        self._concluded = KeptVerdicts()

    def _size_target(self, spec: JobSpec) -> SizeTarget:
        sm = self.options(spec)
        region = sm.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        return SizeTarget("aws", sm.instance_type, "sagemaker.instance_type", region=region)

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
            account = self._clients.account(region)
            location, owner = location.replace(ACCOUNT, account), str(owner or "").replace(ACCOUNT, account)
        return S3Checkpoints(
            self._client("s3", region),
            location,
            region=region,
            owner=str(owner) if owner else None,
            kms_key=target.kms_key,
            translate=translate,
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

    # -- AWS (client.py: boto3 imported there, never at render) -----------------------------------
    def _client(self, service: str, region: str, attempts: int = 8) -> Any:
        return self._clients.client(service, region, attempts)

    def _record(self, run_id: str) -> SageMakerRunInfo | None:
        record = self.records.get(run_id)
        if record is None or record.backend != self.name:
            return None
        return SageMakerRunInfo.from_fields(record.info)

    def _region_of(self, run_id: str) -> str:
        info = self._record(run_id)
        if info is not None and info.region:
            return info.region
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if not region:
            raise UserError(f"cannot tell the region of {run_id}: set AWS_REGION")
        return region

    def _translate(self, error: Exception) -> CloudDDPError | None:
        return translate(error)

    # -- launch ------------------------------------------------------------------------------
    def _launch(self, plan: SageMakerPlan, *, provision: bool, progress: Progress | None) -> Launched:
        return send(plan, self._clients, progress)

    def _preflight(self, plan: SageMakerPlan) -> list[Check]:
        return preflight(plan, self._clients)

    # -- run verbs ---------------------------------------------------------------------------
    def _describe_job(self, run_id: str) -> dict[str, Any] | None:
        return describe_job(self._client("sagemaker", self._region_of(run_id)), run_id)

    def _describe(self, run_id: str) -> RunStatus | None:
        """DescribeTrainingJob's answer; a job whose script failed (AlgorithmError) because a collective timed out
        is a hang, with the verdict the hang doctor printed in its log (read once, status.py)."""
        d = self._describe_job(run_id)
        if d is None:
            return None
        status = job_status(self.name, run_id, d)
        if status.state is RunState.FAILED and status.cause is Cause.USER_ERROR:
            hosts = int(status.details.get("instance_count") or 1)
            whole = status.ended_at is None or time.time() - status.ended_at > LOG_SETTLE_S
            lines = functools.partial(self._lines, run_id, hosts, follow=False)
            from botocore.exceptions import BotoCoreError, ClientError

            found = self._concluded.of(self.records, run_id, lines, (BotoCoreError, ClientError), whole=whole)
            return concluding(status, found, failure_reason=status.message) if found else status
        return status

    def _log_iter(self, run_id: str, *, follow: bool) -> Iterator[LogLine]:
        yield from self._lines(run_id, int(self.status(run_id).details.get("instance_count") or 1), follow=follow)

    def _lines(self, run_id: str, hosts: int, *, follow: bool) -> Iterator[LogLine]:
        """The lines of the job's ``hosts`` hosts (logs.py)."""
        logs = self._client("logs", self._region_of(run_id))
        finished = functools.partial(self._finished, run_id)
        yield from job_lines(logs, run_id, hosts=hosts, follow=follow, finished=finished, poll=self.poll_seconds)

    def _finished(self, run_id: str) -> bool:
        return self.status(run_id).state.terminal

    def _cancel(self, run_id: str) -> None:
        self._client("sagemaker", self._region_of(run_id)).stop_training_job(TrainingJobName=run_id)

    def _stacks(self, run_id: str) -> Capture:
        """A request object under the job's output path, which one process per host reads every 10 s with the job's
        role (in-job stack_requests.py); the answers and the ranks' dumps come back in the hosts' log streams."""
        d = self._describe_job(run_id) or {}
        if d.get("EnableNetworkIsolation"):
            raise UserError(
                f"{run_id} runs under network isolation: its hosts cannot read a request, so it gives no stacks",
                hint="cloudddp logs RUN (a hang's stacks are printed there by the hang doctor)",
            )
        bucket, _, key = (
            stacks_request(d["OutputDataConfig"]["S3OutputPath"], run_id).removeprefix("s3://").partition("/")
        )
        s3 = self._client("s3", self._region_of(run_id))
        return requested(
            lambda request: s3.put_object(Bucket=bucket, Key=key, Body=request.encode()),
            lambda follow: self.logs(run_id, follow=follow),
            answer_wait=STACKS_WAIT_S,
        )

    def _bill(self, run_id: str) -> Bill | None:
        """The bill from DescribeTrainingJob's times (bill.py)."""
        d = self._describe_job(run_id)
        return None if d is None else training_bill(d)


__all__ = ["SageMakerBackend", "SageMakerOptions"]
