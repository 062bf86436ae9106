"""This process's time zone for the length of a test: ``TZ`` set and read again by the C library (``time.tzset``),
then put back as it was (a ``monkeypatch.setenv`` alone would leave the C library in the test's zone)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def time_zone(zone: str) -> Iterator[None]:
    before = os.environ.get("TZ")
    os.environ["TZ"] = zone
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()
