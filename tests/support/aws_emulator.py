"""moto as a real HTTP server on 127.0.0.1, with what SageMaker does that moto lacks (job states and times,
StopTrainingJob's Stopping phase, SageMaker's Service Quotas), and a proxy in front of it that records every
request and injects faults."""

from __future__ import annotations

import datetime
import hashlib
import http.client
import http.server
import json
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.ports import free_port

ACCOUNT_ID = "123456789012"  # moto's default account


def own_bucket(folder: Path) -> str:
    """A bucket of one test's own on the session's moto, named from its temporary folder (unique in the session;
    the same for every job of that test, so a second job finds the first one's checkpoints): an object an earlier
    test left in a shared bucket cannot satisfy this test's assertions."""
    return "cloudddp-t-" + hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:24]


def aws_environment(url: str) -> dict[str, str]:
    """What a shell needs to talk to the emulator: its endpoint, dummy credentials, a region."""
    return {
        "AWS_ENDPOINT_URL": url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
    }


def use_emulator(monkeypatch: Any, url: str) -> str:
    """This process (and what it starts) talks to the emulator at ``url``, with no profile of the machine's."""
    for key, value in aws_environment(url).items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return url


STARTING = ("Starting", "LaunchingMLInstances", "PreparingTrainingStack", "Pending")
_STARTED: set[str] = set()  # jobs whose TrainingStartTime the emulator set


def _training_job(name: str, region: str) -> Any:
    from moto.sagemaker.models import sagemaker_backends

    return sagemaker_backends[ACCOUNT_ID][region].training_jobs[name]


def set_status(
    name: str,
    status: str,
    secondary: str | None = None,
    region: str = "us-east-1",
    reason: str | None = None,
    *,
    at: datetime.datetime | None = None,
    spot_savings: float = 0.0,
) -> None:
    """Move a training job to ``status`` (moto has no transitions); ``reason`` is the FailureReason
    DescribeTrainingJob reports. With the times SageMaker reports (moto reports none of them): no
    TrainingStartTime while instances start; TrainingStartTime when the job first goes past them (now, or ``at``
    — given again, it moves the start there); at the end (``at``, or now) TrainingEndTime,
    TrainingTimeInSeconds and BillableTimeInSeconds, the latter lower by ``spot_savings`` for a managed spot job."""
    job = _training_job(name, region)
    when = at or datetime.datetime.now(datetime.timezone.utc)
    job.training_job_status = status
    if secondary:
        job.secondary_status = secondary
    if reason is not None:
        job.failure_reason = reason
    if status == "InProgress":
        for attr in ("training_end_time", "training_time_in_seconds", "billable_time_in_seconds"):
            setattr(job, attr, None)
        if (secondary or "") in STARTING:
            job.training_start_time = None
            _STARTED.discard(name)
        elif name not in _STARTED or at is not None:
            job.training_start_time = when
            _STARTED.add(name)
    elif status in ("Completed", "Failed", "Stopped"):
        _end(job, when, spot_savings)


def _end(job: Any, when: datetime.datetime, spot_savings: float = 0.0) -> None:
    """The times SageMaker reports when a job ends: training counts from TrainingStartTime, billed per second."""
    if job.training_start_time is None:
        job.training_start_time = when
    job.training_end_time = when
    training = max(1, math.ceil((when - job.training_start_time).total_seconds()))
    job.training_time_in_seconds = training
    savings = spot_savings if job.enable_managed_spot_training else 0.0
    job.billable_time_in_seconds = max(1, math.ceil(training * (1 - savings)))


NOW_MS = int(time.time() * 1000)  # CloudWatch (and moto) drop events more than 14 days old


def put_logs(name: str, host: str, lines: list[str], start_ms: int) -> None:
    """Write ``lines`` to the CloudWatch stream of host ``host`` of training job ``name``, as SageMaker does."""
    import boto3

    from cloudddp.backends.sagemaker.logs import LOG_GROUP

    logs = boto3.client("logs")
    try:
        logs.create_log_group(logGroupName=LOG_GROUP)
    except logs.exceptions.ResourceAlreadyExistsException:
        pass
    stream = f"{name}/{host}-1700000000"
    try:
        logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
    except logs.exceptions.ResourceAlreadyExistsException:
        pass
    logs.put_log_events(
        logGroupName=LOG_GROUP,
        logStreamName=stream,
        logEvents=[{"timestamp": NOW_MS + start_ms + i, "message": m} for i, m in enumerate(lines)],
    )


STOP_GRACE_S = float(os.environ.get("CLOUDDDP_RIG_SAGEMAKER_STOP_S", "1.5"))
"""How long a stopped job stays Stopping here (SageMaker: the container's SIGTERM, up to 120 s, then SIGKILL)."""


STOP_REQUESTS: dict[str, int] = {}
"""training job -> how many StopTrainingJob requests named it (refused ones included)."""
_HELD_STOPPING: set[str] = set()


@contextmanager
def stopping_held(name: str) -> Iterator[None]:
    """A stop of the training job ``name`` stays in Stopping while the block runs (a container that takes its
    whole grace), however slow the machine; after it, the job goes to Stopped."""
    _HELD_STOPPING.add(name)
    try:
        yield
    finally:
        _HELD_STOPPING.discard(name)


def _stop_training_job(self: Any) -> Any:
    """StopTrainingJob, which moto lacks, as SageMaker answers it: a job that is not in progress (Stopping
    included) is refused; one that is goes to Stopping, and after :data:`STOP_GRACE_S` to Stopped (or, for a job
    in :func:`stopping_held`, once the hold ends). Every request is counted in :data:`STOP_REQUESTS`."""
    from moto.sagemaker.exceptions import ValidationError
    from moto.sagemaker.responses import ActionResult

    name = self._get_param("TrainingJobName")
    STOP_REQUESTS[name] = STOP_REQUESTS.get(name, 0) + 1
    job = self.sagemaker_backend.training_jobs.get(name)
    if job is None:
        raise ValidationError(message=f"Requested resource not found: training job {name}")
    if job.training_job_status != "InProgress":
        raise ValidationError(
            message=f"The request was rejected because the training job is in status {job.training_job_status}."
        )
    job.training_job_status, job.secondary_status = "Stopping", "Stopping"

    def stopped() -> None:
        if name in _HELD_STOPPING:
            later(0.05)
        elif job.training_job_status == "Stopping":
            job.training_job_status, job.secondary_status = "Stopped", "Stopped"
            _end(job, datetime.datetime.now(datetime.timezone.utc))

    def later(seconds: float) -> None:
        timer = threading.Timer(seconds, stopped)
        timer.daemon = True
        timer.start()

    later(STOP_GRACE_S)
    return ActionResult({})


def _starts_in_progress(create: Any) -> Any:
    """moto creates a training job already Completed, stamped as started; SageMaker's is InProgress (Starting),
    with no TrainingStartTime until its instances are up, until it ends."""

    def created(self: Any, *args: Any, **kwargs: Any) -> Any:
        job = create(self, *args, **kwargs)
        job.training_job_status, job.secondary_status = "InProgress", "Starting"
        job.training_start_time = job.training_end_time = None
        return job

    return created


_QUOTAS: dict[tuple[str, str], float] = {}
"""(region, quota name) -> value: SageMaker's rows of ListServiceQuotas (:func:`sagemaker_quotas` sets them)."""
QUOTA_PAGE = 2
"""Rows per ListServiceQuotas page when the caller names no MaxResults (small: every page must be read)."""


@contextmanager
def sagemaker_quotas(quotas: dict[str, float], region: str = "us-east-1") -> Iterator[None]:
    """SageMaker's Service Quotas in ``region`` are ``quotas`` (name -> value, e.g. ``ml.g5.2xlarge for training
    job usage``) while the block runs, and gone after it, whatever the test did: the emulator is the session's."""
    clash = sorted(name for name in quotas if (region, name) in _QUOTAS)
    assert not clash, f"quotas already set by another test: {clash}"
    _QUOTAS.update({(region, name): value for name, value in quotas.items()})
    try:
        yield
    finally:
        for name in quotas:
            _QUOTAS.pop((region, name), None)


def _list_service_quotas(self: Any) -> str:
    """ListServiceQuotas, which moto lacks, as Service Quotas answers it for SageMaker: the quotas set with
    :func:`sagemaker_quotas`, in pages of ``MaxResults`` (:data:`QUOTA_PAGE`) with a ``NextToken``."""

    params = json.loads(self.body)
    if params.get("ServiceCode") != "sagemaker":
        return json.dumps({"Quotas": []})
    rows = [
        {
            "ServiceCode": "sagemaker",
            "ServiceName": "Amazon SageMaker",
            "QuotaArn": f"arn:aws:servicequotas:{region}:{ACCOUNT_ID}:sagemaker/L-{i:08X}",
            "QuotaCode": f"L-{i:08X}",
            "QuotaName": name,
            "Value": value,
            "Unit": "None",
            "Adjustable": True,
            "GlobalQuota": False,
        }
        for i, ((region, name), value) in enumerate(sorted(_QUOTAS.items()))
        if region == self.region
    ]
    start, size = int(params.get("NextToken") or 0), int(params.get("MaxResults") or QUOTA_PAGE)
    answer: dict[str, Any] = {"Quotas": rows[start : start + size]}
    if start + size < len(rows):
        answer["NextToken"] = str(start + size)
    return json.dumps(answer)


LOG_PAGE = 2
"""Events per GetLogEvents page when the caller names no limit (small: a stream takes several pages)."""


def _get_log_events(self: Any) -> str:
    """GetLogEvents as CloudWatch Logs may answer it (botocore's model of the operation: "Partially full or empty
    pages don't necessarily mean that pagination is finished. As long as the ``nextForwardToken`` returned is NOT
    equal to the ``nextToken`` that you passed into the API call, there might be more log events available"):
    pages of :data:`LOG_PAGE` events, and an empty page, with a token of its own, before each page read with a
    forward token while the stream has events past it. At the end, moto's answer: the token passed in."""
    token = self._get_param("nextToken") or ""
    events, backward, forward = self.logs_backend.get_log_events(
        log_group_name=self._get_param("logGroupName"),
        log_group_id=self._get_param("logGroupIdentifier"),
        log_stream_name=self._get_param("logStreamName"),
        start_time=self._get_param("startTime"),
        end_time=self._get_param("endTime"),
        limit=self._get_param("limit") or LOG_PAGE,
        next_token=("f/" + token[2:]) if token.startswith("e/") else token or None,  # an empty page's: the same
        start_from_head=self._get_param("startFromHead", False),
    )
    if token.startswith("f/") and events:
        events, forward = [], "e/" + token[2:]
    return json.dumps({"events": events, "nextBackwardToken": backward, "nextForwardToken": forward})


@contextmanager
def moto_server() -> Iterator[str]:
    """moto on a free port of 127.0.0.1, served by a thread of this process: it ends with this process (a
    pytest-xdist worker whose main process is gone ends within about 15 s, see ``watchdog.py``)."""
    from moto.logs.responses import LogsResponse
    from moto.sagemaker.models import SageMakerModelBackend
    from moto.sagemaker.responses import SageMakerResponse
    from moto.server import ThreadedMotoServer
    from moto.servicequotas.responses import ServiceQuotasResponse

    SageMakerResponse.stop_training_job = _stop_training_job  # type: ignore[attr-defined]
    LogsResponse.get_log_events = _get_log_events  # type: ignore[method-assign]
    ServiceQuotasResponse.list_service_quotas = _list_service_quotas  # type: ignore[attr-defined]
    if not getattr(SageMakerModelBackend.create_training_job, "starts_in_progress", False):
        SageMakerModelBackend.create_training_job = _starts_in_progress(SageMakerModelBackend.create_training_job)
        SageMakerModelBackend.create_training_job.starts_in_progress = True  # type: ignore[attr-defined]
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def resource_in_use(headers: Any, body: bytes) -> bytes | None:
    """SageMaker's answer to a CreateTrainingJob whose name is taken in its account and region (botocore's model:
    the operation's ``ResourceInUse`` error, a shape with ``Message``), or None when the name is free. The region
    is the request's, from its signature's credential scope."""
    from moto.sagemaker.models import sagemaker_backends

    name = json.loads(body)["TrainingJobName"]
    region = headers.get("Authorization", "").split("Credential=")[1].split("/")[2]
    if name not in sagemaker_backends[ACCOUNT_ID][region].training_jobs:
        return None
    arn = f"arn:aws:sagemaker:{region}:{ACCOUNT_ID}:training-job/{name}"
    message = (
        "Training job names must be unique within an AWS account and region, and a training job with this name "
        f"already exists ({arn})"
    )
    return json.dumps({"__type": "ResourceInUse", "Message": message}).encode()


@dataclass
class FaultProxy:
    """Forwards to ``upstream`` and records each request; ``rule(target, count)`` may answer instead: 'throttle',
    '503' or 'drop' (forward the request, then close the connection without a response: a lost response).

    A CreateTrainingJob that names an existing job is answered as SageMaker answers it (moto overwrites the job
    instead): 400, ``ResourceInUse``, naming the job's ARN (:func:`resource_in_use`)."""

    upstream: str
    rule: Callable[[str, int], str | None] = lambda target, n: None
    seen: dict[str, int] = field(default_factory=dict)
    sent: list[tuple[str, str, bytes]] = field(default_factory=list)
    """(target, path with its query, body) of every request, in order: what was sent to AWS, byte for byte."""
    in_use: list[str] = field(default_factory=list)
    """The job names of the CreateTrainingJob requests answered ``ResourceInUse``."""

    def target_of(self, handler: http.server.BaseHTTPRequestHandler, body: bytes) -> str:
        amz = handler.headers.get("X-Amz-Target", "")
        if amz:
            return amz.split(".")[-1]
        if b"Action=" in body:
            return body.split(b"Action=")[1].split(b"&")[0].decode()
        return f"{handler.command} {handler.path.split('?')[0]}"

    @contextmanager
    def running(self) -> Iterator[str]:
        proxy = self
        host, port = self.upstream.removeprefix("http://").split(":")

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                target = proxy.target_of(self, body)
                proxy.seen[target] = proxy.seen.get(target, 0) + 1
                proxy.sent.append((target, self.path, body))
                fault = proxy.rule(target, proxy.seen[target])
                if target == "CreateTrainingJob" and (duplicate := resource_in_use(self.headers, body)):
                    proxy.in_use.append(json.loads(body)["TrainingJobName"])
                    self._reply(400, duplicate, {"Content-Type": "application/x-amz-json-1.1"})
                    return
                if fault == "throttle":
                    payload = b'{"__type":"ThrottlingException","message":"Rate exceeded"}'
                    self._reply(400, payload, {"Content-Type": "application/x-amz-json-1.1"})
                    return
                if fault == "503":
                    self._reply(503, b"<Error><Code>ServiceUnavailable</Code></Error>", {})
                    return
                conn = http.client.HTTPConnection(host, int(port), timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self._reply(
                    resp.status,
                    data,
                    {
                        k: v
                        for k, v in resp.getheaders()
                        if k.lower() not in ("transfer-encoding", "content-length", "connection")
                    },
                )

            def _reply(self, status: int, data: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = _any

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()
