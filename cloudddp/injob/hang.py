"""The hang doctor inside every rank: when a collective times out, every rank's stacks are taken *before* any
rank exits, and the culprit is named in the log.

Shipped in every code snapshot as ``_cloudddp_hang.py``; the stop hooks' ``sitecustomize``
(:mod:`cloudddp.injob.stop_hooks`) installs it in every Python process of the job. Standard library only at
import; torch is imported by the script, and this module only acts once ``torch.distributed.init_process_group``
has returned.

Why inside the ranks: when a collective times out, the rank whose collective timed out raises and exits; its
launcher (torchrun, mpirun, Slurm) then kills every other rank within a second, so a stack taken from outside
afterwards finds the culprit gone, and the log shows only the victim's timeout. Here:

1. After ``init_process_group`` each rank opens two client connections to the job's store (``MASTER_ADDR``:
   ``MASTER_PORT``, torchrun's agent store or rank 0's) and a daemon thread waits on one key of its own
   (:data:`PREFIX` ``wake/<rank>``): a blocked wait, no polling, no cost while the run is healthy. At the
   interpreter's exit the rank wakes its own thread with ``exit`` and lets it end.
2. A rank whose collective timed out (:func:`timed_out`: gloo's ``Timed out waiting``, NCCL's watchdog message, a
   ``DistBackendError``) records the collective's frames from its exception, and the first such rank wakes every
   rank with ``hang``.
3. Every other rank's thread wakes and records every thread's stack (``sys._current_frames``: no signal, the
   script's own handlers untouched), each frame with its source line.
4. The first rank waits up to :data:`REPORT_SECONDS` for all of them, decides (:mod:`cloudddp.injob.culprit`) and
   prints the verdict's line (``cloudddp: hang: rank 1 on node 0 (host): train.py:54 in <module>:
   time.sleep(3600); ranks 0: waiting in all_reduce``) and the grouped stacks to its errors, which every backend's
   log carries; the other timed-out ranks wait for that before they exit. Then the exception goes on as it would
   have.

A rank that gave no stack in time is named as such (its process is gone, or it holds the GIL in native code).
An NCCL timeout that aborts the process from NCCL's own watchdog thread (``TORCH_NCCL_ASYNC_ERROR_HANDLING``)
never reaches Python: there the stall watchdog and ``cloudddp stacks`` remain. Restarts under torchrun get their
own keys (``TORCHELASTIC_RESTART_COUNT``).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import re
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

SHIPPED_AS = "_cloudddp_hang.py"
CULPRIT_AS = "_cloudddp_culprit.py"  # cloudddp/injob/culprit.py
PREFIX = "cloudddp-doctor"
REPORT_SECONDS = float(os.environ.get("CLOUDDDP_HANG_REPORT_SECONDS", "10"))
"""How long the first timed-out rank waits for every rank's stacks before it decides with those it has."""
TIMEOUT = re.compile(r"Timed out waiting|collective operation timeout|timed out after|Timeout\(ms\)", re.IGNORECASE)
SELF = ("_cloudddp_hang.py", "hang.py")


def culprit_module() -> ModuleType:
    """:mod:`cloudddp.injob.culprit`, shipped beside this file (or cloudddp's own, beside it in the package)."""
    here = Path(__file__).resolve().parent
    where = here / CULPRIT_AS if (here / CULPRIT_AS).is_file() else here / "culprit.py"
    name = CULPRIT_AS.removesuffix(".py")
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, where)
    if spec is None or spec.loader is None:
        raise ImportError(f"{where} cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def timed_out(error: BaseException | None) -> str | None:
    """The first line of a collective's timeout in ``error`` or what caused it, or None."""
    seen = 0
    while error is not None and seen < 8:
        if type(error).__name__ == "DistBackendError" or TIMEOUT.search(str(error)):
            return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
        error = error.__cause__ or error.__context__
        seen += 1
    return None


def _frames(stack: list[traceback.FrameSummary]) -> list[list[object]]:
    """Most recent call first, each with its source line; this module's own frames left out."""
    kept = [f for f in stack if not f.filename.endswith(SELF)]
    return [[f.filename, f.lineno or 0, f.name, (f.line or "").strip()] for f in reversed(kept)]


def snapshot(rank: int, timed_out_in: str = "", error: BaseException | None = None) -> dict[str, Any]:
    """This process's threads as the doctor records them (:func:`cloudddp.injob.culprit.from_record`). With
    ``error``, the main thread is the collective's frames where it raised."""
    main = threading.main_thread().ident
    names = {t.ident: t.name for t in threading.enumerate()}
    threads = []
    for ident, frame in sys._current_frames().items():
        if ident == threading.get_ident() and ident != main:
            continue  # the doctor's own thread
        stack = traceback.extract_stack(frame)
        if ident == main and error is not None:
            stack = traceback.extract_tb(error.__traceback__)
        threads.append({"name": names.get(ident, hex(ident)), "main": ident == main, "frames": _frames(stack)})
    return {
        "rank": rank,
        "node": next((os.environ[v] for v in ("GROUP_RANK", "SLURM_NODEID", "NODE_RANK") if v in os.environ), ""),
        "host": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
        "timed_out": timed_out_in,
        "threads": threads,
    }


class Doctor:
    """One rank's end of the exchange (see the module's docstring)."""

    def __init__(self, stores: tuple[Any, Any], rank: int, world: int) -> None:
        self.listening, self.store = stores
        """Two connections: a client's blocked wait holds its connection, and a rank reports while it waits."""
        self.rank, self.world = rank, world
        self.prefix = f"{PREFIX}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"
        self.reported = False

    def key(self, name: str) -> str:
        return self.prefix + name

    def start(self) -> None:
        self.thread = threading.Thread(target=self._answer_when_asked, name="cloudddp-hang-doctor", daemon=True)
        self.thread.start()
        atexit.register(self.stop)

    def _answer_when_asked(self) -> None:
        """Wait for this rank's wake-up: ``hang`` (answer with this process's stacks) or ``exit``."""
        import datetime

        wake = self.key(f"wake/{self.rank}")
        try:
            self.listening.wait([wake], datetime.timedelta(days=3650))
            asked = self.listening.get(wake)
        except Exception:  # noqa: BLE001 - the store gone (the run ending): nothing is asked any more
            return
        if asked == b"hang" and not self.reported:  # a timed-out rank's own record (its collective's) is better
            with contextlib.suppress(Exception):
                self.listening.compare_set(self.key(f"stack/{self.rank}"), "", json.dumps(snapshot(self.rank)))

    def stop(self) -> None:
        """At the interpreter's exit: end the waiting thread while the store still answers. A thread left blocked
        in the store's native wait when the store goes away (rank 0's process, under MPI) aborts the process
        during finalization."""
        with contextlib.suppress(Exception):
            self.store.set(self.key(f"wake/{self.rank}"), "exit")
            self.thread.join(timeout=2)

    def report(self, error: BaseException, why: str) -> None:
        """On a rank whose collective timed out: record, wake the others, and (the first) name the culprit."""
        import datetime

        self.reported = True
        self.store.set(self.key(f"stack/{self.rank}"), json.dumps(snapshot(self.rank, why, error)))
        if self.store.add(self.key("reporters"), 1) != 1:
            with contextlib.suppress(Exception):  # the first one prints; exit once it has (or it gave up)
                self.store.wait([self.key("reported")], datetime.timedelta(seconds=REPORT_SECONDS + 5))
            return
        for rank in range(self.world):
            self.store.set(self.key(f"wake/{rank}"), "hang")
        records = self._gather(time.monotonic() + REPORT_SECONDS)
        culprit = culprit_module()
        stacks = [culprit.from_record(r) for r in records]
        verdict = culprit.decide(stacks, self.world)
        lines = [verdict.line(), "cloudddp: every rank's stack, the odd ones out first:", *culprit.render(stacks)]
        print("\n".join(lines), file=sys.stderr, flush=True)
        self.store.set(self.key("reported"), "1")

    def _gather(self, deadline: float) -> list[dict[str, Any]]:
        keys = {r: self.key(f"stack/{r}") for r in range(self.world)}
        got: dict[int, dict[str, Any]] = {}
        while len(got) < self.world and time.monotonic() < deadline:
            for rank in [r for r in keys if r not in got]:
                if self.store.check([keys[rank]]):
                    with contextlib.suppress(ValueError):
                        got[rank] = json.loads(self.store.get(keys[rank]))
            time.sleep(0.1)
        return [got[r] for r in sorted(got)]


DOCTOR: list[Doctor] = []


def start(dist: Any) -> None:
    """Start this rank's doctor, once the default process group is up (a no-op without a store to reach)."""
    host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if DOCTOR or not (host and port and port.isdigit()) or not dist.is_initialized() or dist.get_world_size() < 2:
        return
    import datetime

    stores = [dist.TCPStore(host, int(port), is_master=False, timeout=datetime.timedelta(seconds=30)) for _ in "ab"]
    DOCTOR.append(Doctor((stores[0], stores[1]), dist.get_rank(), dist.get_world_size()))
    DOCTOR[0].start()


def on_error(error: BaseException) -> None:
    """A collective's timeout about to end this rank: report it first (once)."""
    why = timed_out(error)
    if why is None or not DOCTOR or DOCTOR[0].reported:
        return
    try:
        DOCTOR[0].report(error, why)
    except Exception as e:  # noqa: BLE001 - the exception the script raised goes on regardless
        print(f"cloudddp: hang doctor: {e!r}", file=sys.stderr, flush=True)


def hook(c10d: ModuleType) -> None:
    """Wrap ``init_process_group`` so the doctor starts after it, and the interpreter's last word on an exception
    (``sys.excepthook``, ``threading.excepthook``) so a timed-out rank reports before it exits."""
    original = c10d.init_process_group

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        done = original(*args, **kwargs)
        try:
            start(sys.modules["torch.distributed"])
        except Exception as e:  # noqa: BLE001 - the script runs without the doctor
            print(f"cloudddp: hang doctor not started: {e!r}", file=sys.stderr, flush=True)
        return done

    init_process_group.__wrapped__ = original  # type: ignore[attr-defined]
    init_process_group.__doc__ = original.__doc__
    c10d.init_process_group = init_process_group  # type: ignore[attr-defined]
    distributed = sys.modules.get("torch.distributed")
    if distributed is not None and getattr(distributed, "init_process_group", None) is original:
        distributed.init_process_group = init_process_group  # type: ignore[attr-defined]
    _wrap_excepthooks()


def _wrap_excepthooks() -> None:
    before = sys.excepthook

    def excepthook(kind: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
        on_error(error)
        before(kind, error, tb)

    sys.excepthook = excepthook
    before_thread = threading.excepthook

    def thread_excepthook(args: Any) -> None:
        if args.exc_value is not None:
            on_error(args.exc_value)
        before_thread(args)

    threading.excepthook = thread_excepthook
