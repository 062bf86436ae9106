"""Shared test set-up: every test gets its own cloudddp home, subprocesses import this checkout, and the
cloud emulators (moto, Azurite) start once per session on free ports."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .support.cli import ROOT


@pytest.fixture(autouse=True)
def cloudddp_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("cloudddp-home")
    monkeypatch.setenv("CLOUDDDP_HOME", str(home))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    return home


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """moto as a real HTTP server on 127.0.0.1, for the whole session."""
    from .support.aws_emulator import moto_server

    with moto_server() as url:
        yield url


@pytest.fixture(scope="session")
def blob_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Azurite blob server, for the whole session."""
    from .support.azure_rig import azurite, azurite_binary

    if azurite_binary() is None:
        pytest.skip("Azurite is not installed: `make test` installs it with `npm install`")
    with azurite(tmp_path_factory.mktemp("azurite")) as endpoint:
        yield endpoint
