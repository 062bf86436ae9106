"""Shared test set-up: every test gets its own cloudddp home, subprocesses import this checkout and wait without
spinning (tests/support/cores.py), and the cloud emulators (moto, Azurite) start once per session on free ports."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support import watchdog
from tests.support.cli import ROOT
from tests.support.cores import SHARED_CORES_ENV
from tests.support.leftovers import stop_leftovers
from tests.support.rigs import allowed_on_ci, on_ci, rig_unavailable

if TYPE_CHECKING:
    from tests.support.mlflow_server import MlflowServer
    from tests.support.slurm_cluster import SlurmCluster

for _name, _value in SHARED_CORES_ENV.items():
    os.environ.setdefault(_name, _value)  # before any fixture starts a daemon or a run: all inherit it
os.environ[watchdog.MARK] = secrets.token_hex(8)  # this test process's own: every process it starts inherits it


@pytest.fixture(scope="session", autouse=True)
def nothing_started_here_outlives_this_process() -> Iterator[None]:
    """Should this test process end before its session does (pytest killed), the watchdog ends every process
    that carries its mark: training runs, rig nodes and hosts, daemons (tests/support/watchdog.py)."""
    entry = f"{watchdog.MARK}={os.environ[watchdog.MARK]}"
    watchdog.guard_environ(entry)
    yield
    watchdog.release_environ(entry)


@pytest.fixture(autouse=True)
def cloudddp_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("cloudddp-home")
    monkeypatch.setenv("CLOUDDDP_HOME", str(home))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    yield home
    stop_leftovers(home)  # a test that failed half-way must not leave its runs training


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """moto as a real HTTP server on 127.0.0.1, for the whole session."""
    from tests.support.aws_emulator import moto_server

    with moto_server() as url:
        yield url


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """A real `mlflow server` (sqlite store), for the whole session."""
    import importlib.util

    from tests.support.mlflow_server import running_mlflow_server

    if importlib.util.find_spec("mlflow") is None:
        rig_unavailable("mlflow is not installed (it is in the dev extra: pip install -e '.[dev]')")
    with running_mlflow_server(tmp_path_factory.mktemp("mlflow")) as server:
        yield server


@pytest.fixture(scope="session")
def blob_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Azurite blob server, for the whole session."""
    from tests.support.azure_rig import azurite, azurite_binary

    if azurite_binary() is None:
        rig_unavailable("Azurite is not installed: `make test` installs it with `npm install`")
    with azurite(tmp_path_factory.mktemp("azurite")) as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A real two-node Slurm cluster (own munged, slurmctld, 2 slurmd) for the session; skips when it cannot run."""
    from tests.support.slurm_cluster import cluster_fixture

    yield from cluster_fixture()  # in a folder of its own that an unprivileged test user may enter


@pytest.fixture
def cluster(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """The session's Slurm cluster with ``SLURM_CONF`` pointing at it, as a user's shell on its login node has it:
    for tests that call the Slurm backend (or Slurm's commands) in this process."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    yield slurm_cluster


# -- two workers (make test: pytest -n 2 --dist loadgroup) -----------------------------------------
SECOND_USER_MODULES = (
    "test_second_user.py",
    "test_rendezvous_takeover.py",
    "test_planted_state.py",
    "test_config_second_user.py",
    "test_rendezvous_endpoint.py",
)
"""Modules that act as the second Unix user outside the Slurm rig (whose jobs run as the same user)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that share one machine-wide party run on one worker, one after another: the session's Slurm cluster
    (one per worker would be two sets of daemons) and the second Unix user (its home and /tmp folder are the same
    for every worker). Without pytest-xdist the mark does nothing."""
    for item in items:
        if "slurm_cluster" in item.fixturenames or item.path.name in SECOND_USER_MODULES:
            item.add_marker(pytest.mark.xdist_group("cluster-and-second-user"))


# -- on CI, a skip is a missing proof -------------------------------------------------------------
_unexpected_skips: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Remember every skip whose reason is not one of those allowed on CI (:data:`support.rigs.ALLOWED_ON_CI`)."""
    _note_skip(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """A module skipped while it is collected (``pytest.importorskip`` or ``pytest.skip(allow_module_level=True)``
    at its top) skips every test in it without a test report: it counts as their skip. Under xdist the
    controller sees the workers' skipped collections here too."""
    _note_skip(report)


def _note_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    if report.skipped and on_ci():
        reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if not allowed_on_ci(reason):
            _unexpected_skips.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A CI run that skipped a test for a reason not allowed on CI fails, naming each skip; so does one that
    collected nothing because its modules skipped (exit status 5, no tests collected)."""
    if _unexpected_skips and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        print("\nCI=true and these tests were skipped (each is a proof missing from this run):", flush=True)
        for line in _unexpected_skips:
            print(f"  {line}", flush=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
