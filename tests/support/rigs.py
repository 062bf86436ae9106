"""What a test does when a rig it needs cannot start (a daemon, an emulator, a system package).

Outside CI it skips, saying what goes untested on this machine. On CI (``CI=true``, as CI sets it) a missing
rig is a failure with its reason: a slow or broken machine must not turn a backend's proofs into skips while
the run stays green. The skips that remain allowed on CI are listed in :data:`ALLOWED_ON_CI`, each with its
reason; ``tests/conftest.py`` fails a CI run that skipped anything else.
"""

from __future__ import annotations

import os
import re
from typing import NoReturn

import pytest

ALLOWED_ON_CI: dict[str, str] = {
    r"the \w+ backend needs no credentials": "the credentials check of the contract applies only to cloud backends",
    r"no emulator harness for the '\w+' backend": "a plugin registered from outside this suite brings its own tests",
}
"""Skip reasons (regular expressions) that are no missing rig: a check that does not apply to a backend."""


def on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def rig_unavailable(reason: str) -> NoReturn:
    """Skip with ``reason``; on CI, fail with it."""
    if on_ci():
        pytest.fail(f"{reason} (CI=true: a rig that cannot start fails the run instead of skipping)", pytrace=False)
    pytest.skip(reason)


def allowed_on_ci(reason: str) -> bool:
    return any(re.search(pattern, reason) for pattern in ALLOWED_ON_CI)
