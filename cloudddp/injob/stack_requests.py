"""Every rank's stacks on request where cloudddp cannot reach a job's machines (SageMaker, Azure ML): one poller per
host reads a request the client left where the job can read it, asks the ranks on its host, and the answers go out
through the run's log.

Shipped in every code snapshot as ``_cloudddp_stack_requests.py``; the rank launcher of ``LOCAL_RANK`` 0
(:mod:`cloudddp.injob.shim`) starts it (:func:`start`), a daemon thread, so each host has one. Standard library
only: mlflow and boto3 are imported when a request is first read, and where the image lacks them there is no poller.

- **The request.** A request id, read every :data:`POLL_SECONDS` (``CLOUDDDP_STACKS_POLL_S``): on Azure ML the
  job's own MLflow run's tag :data:`REQUEST_TAG` (Azure sets ``MLFLOW_TRACKING_URI`` and ``MLFLOW_RUN_ID`` in the
  job, and its identity may read and tag its own run); on SageMaker the S3 object named by :data:`REQUEST_URI`
  (``s3://bucket/key``, beside the job's checkpoints, read with the job's role).
- **The answer.** On an id not answered before, each rank of the job on this host is asked once
  (:func:`cloudddp.injob.rank_stacks.ask_all`: py-spy where it may attach, else the stack signal, on which the rank
  writes its stacks to its own output); then one line per rank, :data:`ANSWER` followed by the request id and the
  answer as JSON (py-spy's dump in it), goes to this process's error stream, which the platform sends to the run's
  log. Nothing else is printed; a request that cannot be read is retried at the next poll, silently.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any, TextIO

SHIPPED_AS = "_cloudddp_stack_requests.py"
RANK_STACKS_AS = "_cloudddp_rank_stacks.py"  # cloudddp/injob/rank_stacks.py, which asks the ranks
REQUEST_TAG = "cloudddp.stacks"
"""The MLflow run tag whose value is the latest request's id (Azure ML)."""
REQUEST_URI = "CLOUDDDP_STACKS_REQUEST"
"""The variable naming the S3 object whose content is the latest request's id (SageMaker)."""
POLL = "CLOUDDDP_STACKS_POLL_S"
POLL_SECONDS = 10.0
"""How often a request is looked for, unless ``CLOUDDDP_STACKS_POLL_S`` says otherwise."""
ANSWER = "cloudddp: stacks "
"""The first words of an answer's line: ``cloudddp: stacks <request>: {answer JSON}``."""
NODE_VARIABLES = ("NODE_RANK", "GROUP_RANK")
"""What tells a job's nodes apart where they share one machine: the platform's node rank, else torchrun's."""


def mlflow_request(run_id: str) -> Callable[[], str | None]:
    """The reader of the request tag of MLflow run ``run_id`` (at the tracking URI of this environment)."""
    client: list[Any] = []

    def read() -> str | None:
        if not client:
            from mlflow.tracking import MlflowClient

            client.append(MlflowClient())
        tags: Mapping[str, str] = client[0].get_run(run_id).data.tags
        return tags.get(REQUEST_TAG) or None

    return read


def s3_request(uri: str) -> Callable[[], str | None]:
    """The reader of the request object at ``uri`` (``s3://bucket/key``); None while there is none."""
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    client: list[Any] = []

    def read() -> str | None:
        if not client:
            import boto3

            client.append(boto3.client("s3"))
        try:
            body = client[0].get_object(Bucket=bucket, Key=key)["Body"].read()
        except client[0].exceptions.NoSuchKey:
            return None
        return body.decode("utf-8", errors="replace").strip() or None

    return read


def request_reader(environ: Mapping[str, str]) -> Callable[[], str | None] | None:
    """Where this job's requests come from, by what its platform set; None where it has no request path."""
    if environ.get(REQUEST_URI, "").startswith("s3://"):
        return s3_request(environ[REQUEST_URI])
    if environ.get("MLFLOW_TRACKING_URI") and environ.get("MLFLOW_RUN_ID"):
        return mlflow_request(environ["MLFLOW_RUN_ID"])
    return None


def markers(environ: Mapping[str, str]) -> tuple[list[str], str]:
    """The environment entries every process of this node's ranks carries (:func:`rank_stacks.ranks_here`), and the
    variable that names the node: the job's name where the platform sets one, and the node's rank."""
    found = [f"{k}={environ[k]}" for k in ("MLFLOW_RUN_ID", "TRAINING_JOB_NAME") if environ.get(k)]
    node = next((k for k in NODE_VARIABLES if environ.get(k)), NODE_VARIABLES[0])
    if environ.get(node):
        found.append(f"{node}={environ[node]}")
    return found, node


class Answerer:
    """Asks this host's ranks for one request and writes the answers' lines."""

    def __init__(self, rank_stacks: Any, environ: Mapping[str, str], out: TextIO | None = None) -> None:
        self.rank_stacks, self.out = rank_stacks, out
        self.markers, self.node = markers(environ)
        self.host = socket.gethostname()

    def __call__(self, request: str) -> None:
        out = self.out or sys.stderr
        for answer in self.rank_stacks.ask_all(self.markers, self.node, self.host):
            out.write(f"{ANSWER}{request}: {json.dumps(asdict(answer))}\n")
            out.flush()


class Poller(threading.Thread):
    """Reads the request every ``interval`` seconds; each id not seen before is answered once (``answer``)."""

    def __init__(self, read: Callable[[], str | None], answer: Callable[[str], None], interval: float) -> None:
        super().__init__(name="cloudddp-stacks", daemon=True)
        self.read, self.answer, self.interval = read, answer, interval
        self.stopped = threading.Event()
        self.answered: str | None = None

    def poll(self) -> None:
        try:
            request = self.read()
        except Exception:  # noqa: BLE001 - no store, no rights, no module: nothing to answer, training goes on
            return
        if request and request != self.answered:
            self.answered = request
            self.answer(request)

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            self.poll()

    def stop(self) -> None:
        self.stopped.set()


def interval(environ: Mapping[str, str]) -> float:
    try:
        return max(0.5, float(environ.get(POLL, POLL_SECONDS)))
    except ValueError:
        return POLL_SECONDS


def start(rank_stacks: Any, environ: Mapping[str, str] = os.environ) -> Poller | None:
    """This host's poller, started, where this process is its node's first (``LOCAL_RANK`` 0) and the platform gives
    a request path; None elsewhere."""
    read = request_reader(environ)
    if environ.get("LOCAL_RANK", "0") != "0" or read is None or rank_stacks is None:
        return None
    poller = Poller(read, Answerer(rank_stacks, environ), interval(environ))
    poller.start()
    return poller
