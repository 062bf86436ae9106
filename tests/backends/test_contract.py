"""Every registered backend obeys the contract written in ``cloudddp/backends/base.py``.

The checks are the same for each backend; only the harness differs (real torchrun processes locally,
moto for SageMaker, the real azure-ai-ml SDK against the offline workspace for Azure ML).
"""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from cloudddp.backends.features import Feature
from cloudddp.backends.plugins import backend_class, names
from cloudddp.backends.status import RunState
from cloudddp.errors import RunNotFound
from cloudddp.runs.runner import Runner
from tests.support.cli import ROOT, cli
from tests.support.harnesses import (
    TINY,
    AzureMLHarness,
    Harness,
    LocalHarness,
    SageMakerHarness,
    SlurmHarness,
    clean_env,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow
CLOUD_SDKS = ("azure", "boto3", "botocore", "sagemaker", "torch", "mlflow")


@pytest.fixture(params=names())
def harness(request: pytest.FixtureRequest) -> Harness:
    name = request.param
    if name == "local":
        return LocalHarness()
    if name == "sagemaker":
        from tests.support.aws_emulator import aws_environment

        url = request.getfixturevalue("moto_url")
        for key, value in aws_environment(url).items():
            request.getfixturevalue("monkeypatch").setenv(key, value)
        return SageMakerHarness(url)
    if name == "azureml":
        from tests.support.azure_rig import env_for_rig

        for key, value in env_for_rig().items():  # the workspace of a run this machine never saw
            request.getfixturevalue("monkeypatch").setenv(key, value)
        return AzureMLHarness(request.getfixturevalue("blob_endpoint"))
    if name == "slurm":
        cluster = request.getfixturevalue("slurm_cluster")
        request.getfixturevalue("monkeypatch").setenv("SLURM_CONF", str(cluster.conf))
        return SlurmHarness(cluster)
    pytest.skip(f"no emulator harness for the {name!r} backend in this suite (a plugin's own tests cover it)")


def test_render_is_offline_and_imports_no_cloud_sdk(harness: Harness) -> None:
    code = (
        "import sys, json; from cloudddp.api import Job;"
        f"plan = Job.load({str(TINY)!r}, {harness.overrides!r}).render({harness.name!r});"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {CLOUD_SDKS!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_an_unknown_run_id_is_the_same_error_on_every_verb(harness: Harness) -> None:
    backend = harness.backend
    for verb in (
        backend.status,
        lambda r: list(backend.logs(r)),
        lambda r: list(backend.metrics(r)),
        backend.cancel,
        backend.bill,
        Runner(backend).cost,  # the runner's verb over the backend's: the same error
    ):
        with pytest.raises(RunNotFound, match=f"no {harness.name} run 'no-such-run-0000'"):
            verb("no-such-run-0000")


def test_cancel_is_idempotent(harness: Harness) -> None:
    run_id = harness.start()
    first: list[bool] = []
    # A local cancel returns once the run has ended; a cloud's once the stop is sent: asked from a thread.
    asked = threading.Thread(target=lambda: first.append(harness.backend.cancel(run_id)))
    with harness.stop_held(run_id) as held:
        asked.start()
        if held:  # the stop takes its grace (SageMaker: Stopping; local: the script saving), held open however slow
            wait_until(lambda: harness.backend.status(run_id).state is RunState.STOPPING, timeout=60)
            wait_until(lambda: harness.stop_requests(run_id) >= 1, timeout=60)
            assert harness.backend.cancel(run_id) is True  # asked again while it stops: no error...
    asked.join(timeout=120)
    assert first == [True]
    if not held and harness.backend.status(run_id).state is RunState.STOPPING:
        assert harness.backend.cancel(run_id) is True
    status = wait_until(lambda: (s := harness.backend.status(run_id)).state.terminal and s, timeout=120)
    if held:
        assert harness.stop_requests(run_id) == 1  # ...and no second stop was sent
    assert status.state is RunState.CANCELLED, status
    assert harness.backend.cancel(run_id) is False  # already ended: said, not an error
    assert harness.backend.status(run_id).state is RunState.CANCELLED


def test_following_logs_ends_when_the_run_ends(harness: Harness) -> None:
    if isinstance(harness, (LocalHarness, SlurmHarness)):  # runs that end when their script does
        run_id = harness.short()
    else:
        run_id = harness.start()
        threading.Timer(1.0, harness.end, args=(run_id,)).start()
    lines: list[str] = []
    follower = threading.Thread(
        target=lambda: lines.extend(line.text for line in harness.backend.logs(run_id, follow=True))
    )
    follower.start()
    follower.join(timeout=120)
    assert not follower.is_alive(), "logs(follow=True) did not end after the run ended"
    assert harness.backend.status(run_id).state is RunState.SUCCEEDED
    assert lines


def test_missing_credentials_exit_2_with_the_fix_on_status_logs_and_cancel(harness: Harness) -> None:
    env = harness.without_credentials()
    if env is None:
        pytest.skip(f"the {harness.name} backend needs no credentials")
    run_id = harness.start()  # known to this machine's registry, so the CLI asks the backend
    for verb in ("status", "logs", "cancel"):
        result = cli(verb, run_id, env=clean_env(env), inherit=False, timeout=120)
        assert result.returncode == 2, (verb, result.stdout, result.stderr[-3000:])
        assert "Traceback" not in result.stderr and "hint:" in result.stderr, (verb, result.stderr[-3000:])


@pytest.mark.parametrize("name", [n for n in names() if not backend_class(n).capabilities.supports(Feature.PROVISION)])
def test_no_provision_is_a_clean_refusal_where_nothing_is_provisioned(name: str) -> None:
    result = cli("submit", str(TINY), "-b", name, "--no-provision", "--detach", "-y")
    assert result.returncode == 2, result.stderr
    assert "--no-provision" in result.stderr and "Traceback" not in result.stderr
