"""Waiting for a condition that another process makes true (a watcher, an emulator, a daemon)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import IO, TypeVar

T = TypeVar("T")

LOADED = 600
"""Seconds a rig's multi-host training may take where the machine runs another copy of the suite beside this one
(make test must pass so, docs/development.md): there, on two cores, the frameworks' two-host cells took 230-306 s
against 120-170 s on a quiet machine, so a wait sized from a quiet run is not enough. A bound on a hang, never a
measurement."""


def wait_until(predicate: Callable[[], T], timeout: float = 180, poll: float = 0.2) -> T:
    """The first truthy value of ``predicate()``, polled every ``poll`` s; TimeoutError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise TimeoutError("condition not met in time")


class LineReader:
    """Collects the lines of a process's output stream on a thread, so a test can wait for a line to arrive
    (a positive signal) while the process goes on."""

    def __init__(self, stream: IO[str]) -> None:
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            with self._lock:
                self._lines.append(line)

    def so_far(self) -> str:
        with self._lock:
            return "".join(self._lines)

    def text(self, timeout: float = 60) -> str:
        """Everything the stream carried, once it has ended (the process exited)."""
        self._thread.join(timeout=timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"the stream did not end in {timeout} s")
        return self.so_far()

    def wait_for(self, fragment: str, timeout: float = 120) -> str:
        """The first line containing ``fragment``; TimeoutError (with what arrived) after ``timeout`` s."""

        def found() -> str | None:
            with self._lock:
                return next((line for line in self._lines if fragment in line), None)

        try:
            return wait_until(found, timeout=timeout, poll=0.05)
        except TimeoutError:
            raise TimeoutError(f"no line with {fragment!r} in {timeout} s; got: {self.so_far()[-2000:]!r}") from None
