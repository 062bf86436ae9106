"""Secrets after a real submit to the Azure ML rig (the workspace served over HTTP, blobs on Azurite): the two
canaries (one line, and a multi-line key) reach the job's environment variables in the job's PUT, and nowhere
else: not in any other request the SDK sent (recorded with its body), any blob the submit wrote (the code
snapshot, the datastores' containers), any file the CLI, the recovery watcher or the budget watch wrote, any
command line, or any output of the CLI. The watcher's relaunch after a preemption carries them too."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudddp.api import Run
from cloudddp.backends.status import RunState
from cloudddp.runs.database import RunDatabase
from tests.support import canary
from tests.support.azure_rig import PREEMPTED, WorkspaceModel, create_container, serve, served_environment
from tests.support.cli import ROOT, cli
from tests.support.waiting import LOADED, wait_until

pytestmark = pytest.mark.slow
JOB = ROOT / "jobs" / "cifar10-azureml.yaml"  # 2 × Standard_ND96asr_v4 (priced: the budget watch runs)


@pytest.fixture()
def rig(blob_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkspaceModel]:
    model = WorkspaceModel(blob_endpoint)
    create_container(model)
    with serve(model) as url:
        for key, value in {**served_environment(url, model), **canary.ENVIRONMENT}.items():
            monkeypatch.setenv(key, value)
        yield model


@pytest.mark.timeout(LOADED)  # over 300 s beside another copy of the suite
def test_a_submit_to_the_azure_rig_sends_the_secrets_to_the_jobs_environment_only(
    rig: WorkspaceModel, tmp_path: Path, cloudddp_home: Path
) -> None:
    secrets = [
        f"env.{name}.{key}={json.dumps(value) if isinstance(value, bool) else value}"
        for name, entry in canary.SPEC_ENV.items()
        for key, value in entry.items()
    ]
    fast = {"CLOUDDDP_RECOVERY_POLL": "0.3", "CLOUDDDP_BUDGET_POLL": "0.2"}
    overrides = [*secrets, "name=canary-az", "resources.max_cost=5000"]
    submitted = cli(
        "submit",
        str(JOB),
        "-b",
        "azureml",
        "-y",
        *[a for o in overrides for a in ("-o", o)],
        "--recover",
        "2",
        "--detach",
        env=fast,
    )
    assert submitted.returncode == 0, submitted.stderr
    outputs = [submitted.stdout, submitted.stderr]
    found = re.search(r"submitted (\S+)", submitted.stderr)
    assert found, submitted.stderr
    run = Run.attach(found.group(1))
    chain = run.chain
    assert chain is not None and chain.watcher_pid
    first = chain.current.run_id
    rig.set_job_status(first, "Running")
    wait_until(lambda: canary.budget_looks(first) >= 1, timeout=60)  # the budget watch has written its log
    first_watch = RunDatabase().get(first).info["budget"]["watch_pid"]  # type: ignore[union-attr]
    argv_leaks = canary.argv_leaking(chain.watcher_pid) + canary.argv_leaking(first_watch)

    # Preempted: the detached watcher submits attempt 2 itself, the secrets read from its environment.
    rig.fail_job(first, PREEMPTED)
    second = wait_until(lambda: f"{first}-r2" in rig.jobs and f"{first}-r2", timeout=120)
    rig.set_job_status(second, "Running")
    wait_until(lambda: canary.budget_looks(second) >= 1, timeout=60)
    argv_leaks += canary.argv_leaking(RunDatabase().get(second).info["budget"]["watch_pid"])  # type: ignore[union-attr]
    for args in (("status", run.run_id, "--json"), ("list",), ("cost", second, "--json"), ("logs", second)):
        shown = cli(*args)
        outputs += [shown.stdout, shown.stderr]
    cancelled = cli("cancel", run.run_id)
    assert cancelled.returncode == 0, cancelled.stderr
    outputs += [cancelled.stdout, cancelled.stderr]
    wait_until(lambda: run.status().state is RunState.CANCELLED, timeout=60)

    # The one place the values go: the job's environment variables, in each attempt's PUT.
    puts = [
        (path, json.loads(body))
        for method, path, body in rig.sent
        if method == "PUT" and re.search(r"/jobs/[^/?]+\?", path)
    ]
    assert [path.split("/jobs/")[1].split("?")[0] for path, _ in puts] == [first, second]
    for _, body in puts:
        variables = body["properties"]["environmentVariables"]
        assert {k: variables[k] for k in canary.SENT} == canary.SENT
        for key in canary.SENT:
            del variables[key]
    assert [leak for path, body in puts for leak in canary.leaks(json.dumps(body), path)] == []

    # Everything else sent to the workspace, every blob, every file, every output: none of them.
    others = [(m, p, b) for m, p, b in rig.sent if (m, p) not in {("PUT", path) for path, _ in puts}]
    assert len(others) >= 10 and any("/cancel" in p for _, p, _ in others)
    assert [leak for m, p, b in others for leak in canary.leaks(f"{m} {p}\n{b}", f"{m} {p}")] == []
    blobs = 0
    for container in (rig.container, rig.artifact_container):
        client = rig.container_client(container)
        for blob in client.list_blobs():
            blobs += 1
            assert canary.leaks(client.download_blob(blob.name).readall(), f"{container}/{blob.name}") == []
    assert blobs >= 3  # the code snapshot's files were searched
    assert canary.searched_files(cloudddp_home) >= 5 and (cloudddp_home / "chains").is_dir()
    assert canary.files_leaking(cloudddp_home, tmp_path) == []
    assert argv_leaks == []
    assert [leak for text in outputs for leak in canary.leaks(text, "cli output")] == []


def test_a_secret_variable_missing_from_the_shell_stops_the_submit_before_anything_is_created(
    blob_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The value of ``env.X.from_env`` is read at launch; when the shell lacks it, the submit stops with the variable
    named before the cluster is created or the code uploaded."""
    from cloudddp.backends.azureml import AzureMLBackend
    from cloudddp.backends.plugins import load_spec
    from cloudddp.errors import UserError
    from tests.support.azure_rig import FakeCredential, ml_transport

    model = WorkspaceModel(blob_endpoint)
    create_container(model)
    monkeypatch.delenv("CANARY_TOKEN_SRC", raising=False)
    backend = AzureMLBackend(
        records=RunDatabase(), credential=FakeCredential(), transport=ml_transport(model), poll_seconds=0.05, token="m1"
    )
    plan = backend.render(load_spec(JOB, ["env.API_TOKEN.from_env=CANARY_TOKEN_SRC", "env.API_TOKEN.secret=true"]))
    with pytest.raises(UserError, match=r"env\.API_TOKEN reads \$CANARY_TOKEN_SRC, which is not set in this shell"):
        backend.launch(plan)
    assert model.calls == [] and model.computes == {} and model.pending_uploads == 0
