"""The stall watchdog: a run none of whose ranks has printed a line for ``limits.stall_timeout`` is hung (a rank
stuck in a collective that the script never gave a timeout, a deadlock, a dead filesystem), so it is failed as
stalled, with every rank's Python stack in the log to say where each one waits.

The stacks come from ``py-spy dump`` where py-spy is on ``PATH`` and may attach (it needs ptrace rights, which
Yama's default scope gives only to an ancestor of the process), else from :mod:`faulthandler` (both through
:mod:`cloudddp.injob.rank_stacks`, which ``cloudddp stacks`` shares): every Python process of the job gets
:data:`HOOK` through ``PYTHONPATH`` (a ``sitecustomize`` that registers ``faulthandler`` for :data:`STACK_SIGNAL`
and then runs the ``sitecustomize`` it hides, if any), so the signal makes the process write all its threads' stacks
to its stderr and go on. The signal is a real-time one (``SIGRTMIN+5``): SIGUSR1 and SIGUSR2 are taken by Slurm's
and submitit's requeue conventions, which a script may follow. Only a process that catches it is sent it (``SigCgt``
in ``/proc/<pid>/status``): a shell or another non-Python program between the launcher and Python would be killed by
it.

Standard library only, so the in-job launcher (:mod:`cloudddp.injob.shim`) can use it as the local supervisor does.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Hashable
from pathlib import Path

from cloudddp.injob.rank_stacks import catches, py_spy_dump

__all__ = [
    "HOOK",
    "SIGNAL_VARIABLE",
    "STACK_SIGNAL",
    "STARTUP_SECONDS",
    "Watchdog",
    "catches",
    "install_hook",
    "py_spy_dump",
]

STACK_SIGNAL = int(signal.SIGRTMIN) + 5
SIGNAL_VARIABLE = "CLOUDDDP_STACK_SIGNAL"
HOOK = """\
# cloudddp's stall watchdog: this process writes every thread's Python stack to stderr when it gets the signal in
# CLOUDDDP_STACK_SIGNAL, and goes on. Then the sitecustomize this file hides on sys.path, if any, runs.
import faulthandler as _faulthandler
import os as _os
import sys as _sys

try:
    _faulthandler.register(int(_os.environ["CLOUDDDP_STACK_SIGNAL"]), all_threads=True)
except (KeyError, ValueError, RuntimeError, OSError):
    pass


def _hidden():
    import importlib.machinery
    import importlib.util

    here = _os.path.dirname(_os.path.abspath(__file__))
    folders = [_os.path.abspath(p or ".") for p in _sys.path]
    after = _sys.path[folders.index(here) + 1 :] if here in folders else _sys.path  # those before ran first
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", after)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_hidden()
del _hidden
"""


def install_hook(folder: Path) -> Path:
    """Write :data:`HOOK` as ``folder/sitecustomize.py``; ``folder`` goes first on the job's ``PYTHONPATH``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(HOOK)
    return folder


STARTUP_SECONDS = 600.0
"""Before any rank has printed a line, the watchdog waits at least this long: starting (imports, installing the
requirements, the rendezvous, loading data) can be long and silent, and a machine under load makes it longer."""


class Watchdog:
    """When each source (a rank) last printed; :meth:`quiet` says when none has for ``timeout`` seconds (and, before
    the first line of any, for ``startup`` seconds: by default the longer of the timeout and
    :data:`STARTUP_SECONDS`)."""

    def __init__(
        self, timeout: float, clock: Callable[[], float] = time.monotonic, startup: float | None = None
    ) -> None:
        self.timeout = timeout
        self.startup = max(timeout, STARTUP_SECONDS) if startup is None else startup
        self.clock = clock
        self.started = clock()
        self.last: dict[Hashable, float] = {}
        self._lock = threading.Lock()

    def heard(self, source: Hashable) -> None:
        with self._lock:
            self.last[source] = self.clock()

    def silent_for(self) -> float:
        with self._lock:
            return self.clock() - max([self.started, *self.last.values()])

    def quiet(self) -> list[tuple[Hashable, float]] | None:
        """None while some source printed within the timeout (or, before any printed, while the run is within its
        startup time); else every source with how long it has been quiet, the longest first."""
        if self.silent_for() < (self.timeout if self.last else self.startup):
            return None
        now = self.clock()
        with self._lock:
            return sorted(((s, now - t) for s, t in self.last.items()), key=lambda item: -item[1])
