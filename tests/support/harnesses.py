"""One harness per built-in backend: the backend wired to its emulator, a job it renders offline, runs
that stay alive or end by themselves, and a shell without credentials. The contract test runs the same
checks through each of them."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cloudddp.api import Job
from cloudddp.backends.base import Backend
from cloudddp.runs.runner import get_backend
from tests.support.cli import FIXTURES

if TYPE_CHECKING:
    from tests.support.slurm_cluster import SlurmCluster

TINY = FIXTURES / "tinyjob" / "job.yaml"


def clean_env(changes: dict[str, str]) -> dict[str, str]:
    """``os.environ`` with ``changes``; an empty value removes the variable."""
    env = {**os.environ, **changes}
    return {k: v for k, v in env.items() if v != ""}


class Harness:
    name = ""
    overrides: list[str] = []
    backend: Backend[Any]

    def job(self, *extra: str) -> Job:
        return Job.load(TINY, [*self.overrides, *extra])

    def launch(self, *extra: str) -> str:
        return self.backend.launch(self.backend.render(self.job(*extra).spec), checks=False)

    def start(self) -> str:
        """A run that stays alive until it is cancelled or :meth:`end` ends it."""
        raise NotImplementedError

    def end(self, run_id: str) -> None:
        """The run ends by itself (not a cancel): its processes finish."""
        raise NotImplementedError

    def without_credentials(self) -> dict[str, str] | None:
        """Environment for a ``cloudddp`` subprocess with no credentials; None for a backend that needs none."""
        return None

    @contextlib.contextmanager
    def stop_held(self, run_id: str) -> Iterator[bool]:
        """While the block runs, a cancelled run stays stopping (a cloud's grace); yields whether this harness can
        hold it so (False: its stop has no grace here, or one the harness cannot hold)."""
        yield False

    def stop_requests(self, run_id: str) -> int:
        """How many stop requests reached the emulator for ``run_id`` (for a harness that holds stops)."""
        raise NotImplementedError


class LocalHarness(Harness):
    name = "local"

    def __init__(self) -> None:
        self.backend = get_backend("local")
        self.hold = Path(tempfile.mkdtemp(prefix="cloudddp-hold-")) / "hold"

    def start(self) -> str:
        """The run, once its script trains (its first metric line: its SIGTERM handler is set)."""
        run_id = self.launch(f"code.args=[--epochs, 1000, --sleep, 0.3, --hold-while, '{self.hold}']")
        next(iter(self.backend.metrics(run_id, follow=True)))
        return run_id

    @contextlib.contextmanager
    def stop_held(self, run_id: str) -> Iterator[bool]:
        """The script, once stopping, waits while the hold file exists (well inside the local grace)."""
        self.hold.touch()
        try:
            yield True
        finally:
            self.hold.unlink()

    def stop_requests(self, run_id: str) -> int:
        """How many SIGTERMs reached the script's rank 0 (each prints a line)."""
        return sum(line.source == "rank0" and line.text.strip() == "got SIGTERM" for line in self.backend.logs(run_id))

    def end(self, run_id: str) -> None:
        raise AssertionError("a local run ends when its script does: use short()")

    def short(self) -> str:
        return self.launch("code.args=[--epochs, 3]")


class SageMakerHarness(Harness):
    name = "sagemaker"
    overrides = [
        "sagemaker.region=us-east-1",
        "sagemaker.role=arn:aws:iam::123456789012:role/SageMakerRole",
        "sagemaker.bucket=cloudddp-contract",
        "sagemaker.instance_type=ml.m5.xlarge",
        "sagemaker.image=763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.4-cpu-py311",
    ]

    def __init__(self, moto_url: str) -> None:
        self.url = moto_url
        self.backend = get_backend("sagemaker", poll_seconds=0.1, token=f"c{time.time_ns() % 10**9}")

    def start(self) -> str:
        from tests.support.aws_emulator import put_logs, set_status

        run_id = self.launch()
        set_status(run_id, "InProgress", "Training")
        put_logs(run_id, "algo-1", ["[rank0]:starting rank 0"], 0)  # after the launcher's rank prefix
        return run_id

    def end(self, run_id: str) -> None:
        from tests.support.aws_emulator import set_status

        set_status(run_id, "Completed", "Completed")

    @contextlib.contextmanager
    def stop_held(self, run_id: str) -> Iterator[bool]:
        from tests.support.aws_emulator import stopping_held

        with stopping_held(run_id):
            yield True

    def stop_requests(self, run_id: str) -> int:
        from tests.support.aws_emulator import STOP_REQUESTS

        return STOP_REQUESTS.get(run_id, 0)

    def without_credentials(self) -> dict[str, str]:
        from tests.support.aws_emulator import aws_environment

        return {
            **aws_environment(self.url),
            "AWS_ACCESS_KEY_ID": "",
            "AWS_SECRET_ACCESS_KEY": "",
            "AWS_SESSION_TOKEN": "",
            "AWS_PROFILE": "",
            "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
            "AWS_CONFIG_FILE": "/nonexistent",
            "AWS_EC2_METADATA_DISABLED": "true",
        }


class AzureMLHarness(Harness):
    name = "azureml"
    overrides = [
        "azureml.subscription_id=00000000-0000-0000-0000-000000000000",
        "azureml.resource_group=ml-rg",
        "azureml.workspace=ml-workspace",
        "azureml.compute=cpu-cluster",
        "azureml.vm_size=Standard_D4s_v3",
    ]

    def __init__(self, blob_endpoint: str) -> None:
        from tests.support.azure_rig import FakeCredential, WorkspaceModel, create_container, ml_transport

        self.model = WorkspaceModel(blob_endpoint)
        create_container(self.model)
        self.backend = get_backend(
            "azureml",
            credential=FakeCredential(),
            transport=ml_transport(self.model),
            poll_seconds=0.05,
            token=f"c{time.time_ns() % 10**9}",
        )

    def start(self) -> str:
        run_id = self.launch()
        self.model.set_job_status(run_id, "Running")
        self.model.write_log(run_id, 0, "starting rank 0\n")
        return run_id

    def end(self, run_id: str) -> None:
        self.model.set_job_status(run_id, "Completed")

    @contextlib.contextmanager
    def stop_held(self, run_id: str) -> Iterator[bool]:
        self.model.held_cancels.add(run_id)
        try:
            yield True
        finally:
            self.model.held_cancels.discard(run_id)

    def stop_requests(self, run_id: str) -> int:
        return self.model.cancel_requests.get(run_id, 0)

    def without_credentials(self) -> dict[str, str]:
        from tests.support.azure_rig import env_for_rig

        # DefaultAzureCredential finds nothing: no service principal, no managed identity, no az CLI login.
        return {
            **env_for_rig(),
            "AZURE_CLIENT_ID": "",
            "AZURE_CLIENT_SECRET": "",
            "AZURE_TENANT_ID": "",
            "AZURE_USERNAME": "",
            "IDENTITY_ENDPOINT": "",
            "MSI_ENDPOINT": "",
            "HOME": "/nonexistent",
        }


class SlurmHarness(Harness):
    """The Slurm backend against the real two-node cluster (tests/support/slurm_cluster.py), reached as a user
    reaches theirs: Slurm's commands on PATH and SLURM_CONF in the environment."""

    name = "slurm"
    # The nodes run this interpreter (torch is in it); the test cluster's KillWait is 5 s.
    overrides = [f"slurm.python={sys.executable}", "slurm.kill_wait=5", "slurm.status_every=1"]

    def __init__(self, cluster: SlurmCluster) -> None:
        self.cluster = cluster
        self.backend = get_backend("slurm", poll_seconds=0.2)

    def start(self) -> str:
        return self.launch("code.args=[--epochs, 1000, --sleep, 0.3]")

    def end(self, run_id: str) -> None:
        raise AssertionError("a Slurm run ends when its script does: use short()")

    def short(self) -> str:
        return self.launch("code.args=[--epochs, 2, --sleep, 0.05]")
