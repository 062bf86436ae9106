"""Shared test set-up: every test gets its own cloudddp home, and subprocesses import this checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .support.slurm_cluster import SlurmCluster, cluster_fixture

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(autouse=True)
def cloudddp_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("cloudddp-home")
    monkeypatch.setenv("CLOUDDDP_HOME", str(home))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    return home


def cli(*args: str, timeout: float = 120, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m cloudddp ARGS`` as a user would, capturing its output."""
    return subprocess.run(
        [sys.executable, "-m", "cloudddp", *args],
        capture_output=True, text=True, timeout=timeout, cwd=cwd or ROOT,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A real two-node Slurm cluster (own munged, slurmctld, 2 slurmd) for the session; skips when it cannot run."""
    yield from cluster_fixture(tmp_path_factory.mktemp("slurm"))
