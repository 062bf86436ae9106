"""Daemons die with their test run: a watchdog process beside each test process that starts one.

A rig that starts a daemon hands its pid to :func:`guard` (or :func:`guarded`) and takes it back with
:func:`release` once its own stop has ended it; processes that escape every pid the rig knows (a Slurm job's
``slurmstepd`` and tasks, which Slurm starts in sessions of their own) are guarded by an entry their environment
holds (:func:`guard_environ`, such as ``SLURM_CONF=<the cluster's slurm.conf>``). The first of these starts the
watchdog: this file run as a script, in a session of its own (a Ctrl-C in the terminal does not reach it), told
the registrations on its stdin. Every :data:`POLL_S` s it looks whether the test process (its *owner*) still
runs, by pid and start time. Once it is gone, the watchdog sends SIGKILL to whatever is still guarded: each
guarded process that still runs (the same start time: not a later process of its pid), every process whose
environment holds a guarded entry, and the descendants of all of these; then it exits.

Every process a test process starts (a training run's supervisor, store, agents and ranks; a rig's node or host;
a daemon) inherits :data:`MARK` with a value of that test process's own (``tests/conftest.py`` sets it and guards it
with :func:`guard_environ` for the session): a run that outlives the command that started it, in a session of its
own, ends too.

The owner is gone when pytest is (SIGKILL, SIGTERM, a crash), or, in a pytest-xdist worker, at most about 15 s
after pytest's main process is: execnet interrupts a worker whose main process is gone (SIGINT 5 s after, so that
the session's teardown stops what it can the normal way) and ends it 10 s later (``os._exit``) whatever its
teardown still had to do. A session that ends normally has released everything, and its watchdog exits with
nothing to do. Servers that run inside the test process (moto's) end with it. Nothing is found by name. Standard
library only: the watchdog runs this file with ``python -I``.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

POLL_S = 1.0
"""How often the watchdog looks for its owner."""
MARK = "CLOUDDDP_TEST_PROCESS"
"""The environment entry that names the test process a process was started under (16 random hex digits, set by
each test process for itself: a pytest-xdist worker's own environment holds its parent's at first)."""

Identity = tuple[int, int]
"""A process as (pid, start time in clock ticks since boot): a pid alone may be reused."""


# -- reading /proc --------------------------------------------------------------------------------
def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), or None when it is gone or a zombie."""
    fields = _stat(pid)
    return None if fields is None or fields[0] in ("Z", "X") else int(fields[19])


def identity(pid: int) -> Identity | None:
    started = start_time(pid)
    return None if started is None else (pid, started)


def alive(process: Identity) -> bool:
    return start_time(process[0]) == process[1]


def cmdline(pid: int) -> str:
    """``pid``'s command line, its arguments joined by spaces ("" when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def pids_with_env(needle: str) -> set[int]:
    """Processes whose environment holds an entry starting with ``needle`` (never this process)."""
    found, raw = set(), needle.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if any(item.startswith(raw) for item in environ.split(b"\0")):
            found.add(int(entry.name))
    return found


def with_descendants(pids: set[int]) -> set[int]:
    """``pids`` and every process below them."""
    parents = {}
    for entry in Path("/proc").iterdir():
        fields = _stat(entry.name) if entry.name.isdigit() else None
        if fields is not None:
            parents[int(entry.name)] = int(fields[1])
    found, grew = set(pids), True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in found} - found
        grew = bool(more)
        found |= more
    return found


# -- the test process's side ----------------------------------------------------------------------
class _Watchdog:
    """The watchdog of this process: its pipe, and what this process has guarded (sent again to a new one)."""

    def __init__(self, pids: set[Identity], entries: set[str]) -> None:
        self.owner = os.getpid()
        self.pids, self.entries = pids, entries
        owner = f"{self.owner}:{start_time(self.owner)}"
        self.proc = subprocess.Popen(
            [sys.executable, "-I", __file__, owner], stdin=subprocess.PIPE, text=True, start_new_session=True
        )
        for pid, started in pids:
            self.send(f"+pid {pid} {started}")
        for entry in entries:
            self.send(f"+env {entry}")

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()


_lock = threading.Lock()
_current: _Watchdog | None = None


def _watchdog() -> _Watchdog:
    """This process's watchdog, started on first use (again after a fork, or if it died)."""
    global _current
    mine = _mine()
    if mine is None or mine.proc.poll() is not None:
        pids, entries = (mine.pids, mine.entries) if mine is not None else (set(), set())
        _current = mine = _Watchdog(pids, entries)
    return mine


def guard(pid: int) -> None:
    """Have ``pid`` and its descendants ended should this test process end before :func:`release`."""
    started = start_time(pid)
    if started is None:
        return
    with _lock:
        watchdog = _watchdog()
        watchdog.pids.add((pid, started))
        watchdog.send(f"+pid {pid} {started}")


def release(pid: int) -> None:
    """Forget ``pid``: its rig has stopped it (the watchdog must not signal a later process of that pid)."""
    with _lock:
        watchdog = _mine()
        if watchdog is None:
            return
        for held in [p for p in watchdog.pids if p[0] == pid]:
            _withdraw(watchdog, watchdog.pids, held, f"pid {held[0]} {held[1]}")


def guard_environ(entry: str) -> None:
    """Have every process whose environment holds an entry starting with ``entry`` ended, as :func:`guard`."""
    with _lock:
        watchdog = _watchdog()
        watchdog.entries.add(entry)
        watchdog.send(f"+env {entry}")


def release_environ(entry: str) -> None:
    with _lock:
        watchdog = _mine()
        if watchdog is not None and entry in watchdog.entries:
            _withdraw(watchdog, watchdog.entries, entry, f"env {entry}")


def _mine() -> _Watchdog | None:
    return _current if _current is not None and _current.owner == os.getpid() else None


def _withdraw(watchdog: _Watchdog, held: set[Any], item: object, words: str) -> None:
    held.discard(item)
    with suppress(OSError, ValueError):  # a watchdog that is gone holds nothing
        watchdog.send(f"-{words}")


@contextmanager
def guarded(pid: int) -> Iterator[None]:
    """:func:`guard` for the block; released when it ends (the block's own ``finally`` stops the process)."""
    guard(pid)
    try:
        yield
    finally:
        release(pid)


# -- the watchdog's side --------------------------------------------------------------------------
class _Registry:
    """What the owner has guarded, as its stdin says it."""

    def __init__(self) -> None:
        self.pids: set[Identity] = set()
        self.entries: set[str] = set()
        self._open, self._buffer = True, b""

    def read(self, timeout: float) -> None:
        """Take in what the owner sent within ``timeout`` s (sleep it out once the pipe is closed)."""
        if not self._open:
            time.sleep(timeout)
            return
        if select.select([0], [], [], timeout)[0]:
            chunk = os.read(0, 65536)
            self._open = bool(chunk)
            self._buffer += chunk
            *lines, self._buffer = self._buffer.split(b"\n")
            for line in lines:
                self._apply(line.decode())

    def _apply(self, line: str) -> None:
        op, value = line[:1], line[1:]
        kind, _, rest = value.partition(" ")
        if kind == "pid":
            pid, started = (int(x) for x in rest.split())
            (self.pids.add if op == "+" else self.pids.discard)((pid, started))
        elif kind == "env":
            (self.entries.add if op == "+" else self.entries.discard)(rest)


def _victims(guarded: Iterable[Identity], entries: Iterable[str], spare: set[int]) -> set[int]:
    found = {pid for pid, started in guarded if start_time(pid) == started}  # not a later process of that pid
    for entry in entries:
        found |= pids_with_env(entry)
    return with_descendants(found) - spare


def _say(text: str) -> None:
    with suppress(OSError):
        print(f"test watchdog {os.getpid()}: {text}", file=sys.stderr, flush=True)


def serve(owner: Identity) -> None:
    """Watch ``owner``, then end what it left running (see the module's docstring)."""
    registry = _Registry()
    while alive(owner):
        registry.read(POLL_S)
    victims = _victims(registry.pids, registry.entries, {os.getpid(), 1, owner[0]})
    if victims:
        _say(f"the test process {owner[0]} is gone: SIGKILL to what it left running, {sorted(victims)}")
    for pid in victims:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    pid, started = sys.argv[1].split(":")
    serve((int(pid), int(started)))
