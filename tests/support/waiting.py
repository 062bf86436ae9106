"""Waiting for a condition that another process makes true (a watcher, an emulator, a daemon)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 180, poll: float = 0.2) -> T:
    """The first truthy value of ``predicate()``, polled every ``poll`` s; TimeoutError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise TimeoutError("condition not met in time")
