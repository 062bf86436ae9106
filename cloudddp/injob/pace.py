"""The straggler watch inside every rank: which rank makes the others wait, step after step, and on which host.

Shipped in every code snapshot as ``_cloudddp_pace.py``; the stop hooks' ``sitecustomize``
(:mod:`cloudddp.injob.stop_hooks`) installs it once ``torch.optim`` is imported, when the job carries
:data:`SETTING` (``<factor>:<seconds>``: ``limits.straggler_factor`` and ``limits.straggler_every``). Standard
library only at import; torch is the script's own.

What is measured: in data-parallel training every rank's step *interval* is the same (the fast ranks wait for the
slow one in the gradient all-reduce), so the interval cannot name anyone. Each rank measures its **own work** per
step instead: from the end of an optimizer step (a global post-hook, any optimizer) to the start of the next
``backward`` (data loading, the forward, whatever the script does in between), less the time spent in
``DistributedDataParallel``'s buffer broadcast at the forward's start (where the fast ranks would wait too).
No collective is added: each rank keeps its windows in memory, and every ``seconds`` a daemon thread publishes
their median to the job's store (``MASTER_ADDR:MASTER_PORT``, its own client connection, one ``set``).

Global rank 0's thread reads every rank's latest median and decides (:func:`judge`): a rank whose own work is at
least ``factor`` times the median of the other ranks' (the median of the others, so that two ranks can be compared
at all), and whose extra time is at least :data:`FLOOR_SHARE` of the step interval (less is noise nobody pays
for), is slow; slow in :data:`ROUNDS` looks in a row, it is a straggler. Rank 0 prints one line (:data:`TAG`:
``rank 1 on node 0 (host): 0.21 s of its own work per step against a median of 0.01 s (×21); the others wait for
it``) and one metric record when the stragglers change, and a line when they catch up; the status of a running
run shows the last (:mod:`cloudddp.runs.notes`). A script that never calls an optimizer's ``step`` (or
never ``backward``) is not measured.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any, NamedTuple

SHIPPED_AS = "_cloudddp_pace.py"
SETTING = "CLOUDDDP_STRAGGLER"
"""The job's variable that turns the watch on: ``<factor>:<seconds>`` (``1.5:10``); absent: off."""
TAG = "cloudddp: straggler:"
"""Rank 0's line of the stragglers now (or that there are none any more)."""
CAUGHT_UP = "none now"
"""What the line says once no rank straggles any more."""
METRIC = "CLOUDDDP_METRIC "
"""A metric line's prefix, as :data:`cloudddp.observe.metrics.PREFIX` (a test keeps the two in step)."""
PREFIX = "cloudddp-pace"
FLOOR_SHARE = 0.05
"""The least extra time per step, as a share of the step interval, that makes a slow rank a straggler."""
ROUNDS = 2
"""Looks in a row a rank must be slow in to be named."""
KEEP = 10_000
"""The most windows a rank keeps between two looks (a script of very short steps)."""


def setting(text: str | None) -> tuple[float, float] | None:
    """``(factor, seconds)`` from :data:`SETTING`'s value, or None (absent, off, or not understood)."""
    try:
        factor, seconds = (float(part) for part in (text or "").split(":"))
    except ValueError:
        return None
    return (factor, seconds) if factor > 1 and seconds > 0 else None


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


class Clock:
    """One rank's windows of its own work, and its step intervals, between two looks (:meth:`take`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.works: list[float] = []
        self.intervals: list[float] = []
        self.step_end: float | None = None
        self.open = False
        self.waited = 0.0

    def stepped(self, now: float) -> None:
        """An optimizer's step ended: a window opens."""
        with self.lock:
            if self.step_end is not None and len(self.intervals) < KEEP:
                self.intervals.append(now - self.step_end)
            self.step_end, self.open, self.waited = now, True, 0.0

    def waiting(self, seconds: float) -> None:
        """``seconds`` spent waiting for the other ranks inside the open window."""
        with self.lock:
            if self.open:
                self.waited += seconds

    def backward(self, now: float) -> None:
        """A ``backward`` starts: the open window closes (the next ones until a step are the same step's)."""
        with self.lock:
            if self.open and self.step_end is not None and len(self.works) < KEEP:
                self.works.append(max(0.0, now - self.step_end - self.waited))
            self.open = False

    def take(self) -> tuple[float, float, int] | None:
        """The median own work and step interval since the last look, and how many windows; None without."""
        with self.lock:
            works, intervals = self.works, self.intervals
            self.works, self.intervals = [], []
        if not works:
            return None
        return median(works), median(intervals) if intervals else 0.0, len(works)


class Report(NamedTuple):
    """One rank's look, as it publishes it."""

    rank: int
    work: float
    interval: float
    node: str
    host: str
    seq: int


class Slow(NamedTuple):
    rank: int
    work: float
    median: float
    ratio: float


def judge(reports: Sequence[Report], factor: float) -> list[Slow]:
    """The slow ranks among ``reports`` (each rank's latest look), slowest first: own work at least ``factor``
    times the median of the others', and more than :data:`FLOOR_SHARE` of the step interval over it."""
    if len(reports) < 2:
        return []
    interval = median([r.interval for r in reports])
    slow = []
    for report in reports:
        others = median([r.work for r in reports if r.rank != report.rank])
        extra = report.work - others
        ratio = report.work / others if others > 0 else float("inf")
        if ratio >= factor and extra >= FLOOR_SHARE * interval and extra > 0:
            slow.append(Slow(report.rank, report.work, others, ratio))
    return sorted(slow, key=lambda s: s.work, reverse=True)


def _seconds(value: float) -> str:
    return f"{value:.2g} s" if value < 10 else f"{value:.0f} s"


def _times(ratio: float) -> str:
    return "×∞" if ratio == float("inf") else f"×{ratio:.2g}" if ratio < 10 else f"×{ratio:.0f}"


def where(report: Report) -> str:
    node = f" on node {report.node}" if report.node else ""
    return f"rank {report.rank}{node} ({report.host})"


def line(slow: Sequence[Slow], reports: Mapping[int, Report]) -> str:
    """The line naming ``slow`` (or that none is any more)."""
    if not slow:
        return f"{TAG} {CAUGHT_UP}: every rank's own work per step is within the others' pace"
    parts = [f"{where(reports[s.rank])}: {_seconds(s.work)} of its own work per step" for s in slow]
    them = "it" if len(slow) == 1 else "them"
    against = f"against a median of {_seconds(slow[0].median)} ({_times(slow[0].ratio)})"
    return f"{TAG} {'; '.join(parts)} {against}; the others wait for {them}"


def metric(slow: Sequence[Slow], reports: Mapping[int, Report]) -> str:
    """The stragglers as one metric record (numbers only: the host is in :func:`line`)."""
    values: dict[str, Any] = {"step": None, "epoch": None, "time": round(time.time(), 3), "stragglers": len(slow)}
    if slow:
        worst = slow[0]
        node = reports[worst.rank].node
        values |= {"straggler_rank": worst.rank, "straggler_seconds": round(worst.work, 4)}
        values |= {"straggler_median_seconds": round(worst.median, 4)}
        values["straggler_ratio"] = round(worst.ratio, 2) if worst.ratio != float("inf") else None
        if node.isdigit():
            values["straggler_node"] = int(node)
    return METRIC + json.dumps(values, separators=(",", ":"))


class Verdicts:
    """Rank 0's memory of the looks: how many looks in a row each rank was slow (or not), and who is named. A rank
    is named after :data:`ROUNDS` slow looks in a row, and no longer after as many looks that were not."""

    def __init__(self) -> None:
        self.slow_runs: dict[int, int] = {}
        self.fast_runs: dict[int, int] = {}
        self.last: dict[int, Slow] = {}
        self.known: dict[int, Report] = {}
        self.named: set[int] = set()

    def look(self, slow: Sequence[Slow], reports: Mapping[int, Report]) -> list[str]:
        """The lines to print after this look (every rank's latest in ``reports``): none while the named stay."""
        now = {s.rank: s for s in slow}
        self.known.update(reports)
        for rank in reports:
            hit, miss = (self.slow_runs, self.fast_runs) if rank in now else (self.fast_runs, self.slow_runs)
            hit[rank], miss[rank] = hit.get(rank, 0) + 1, 0
            if rank in now:
                self.last[rank] = now[rank]
        named = {r for r in reports if self.slow_runs[r] >= ROUNDS}
        named |= {r for r in self.named if self.fast_runs.get(r, 0) < ROUNDS}
        if named == self.named:
            return []
        self.named = named
        persistent = sorted((self.last[r] for r in named), key=lambda s: s.work, reverse=True)
        return [line(persistent, self.known), metric(persistent, self.known)]


class Watch:
    """This rank's thread: publish a look every ``seconds``; on global rank 0, judge every rank's latest."""

    def __init__(self, clock: Clock, factor: float, seconds: float) -> None:
        self.clock, self.factor, self.seconds = clock, factor, seconds
        self.prefix = f"{PREFIX}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"
        self.node = next((os.environ[v] for v in ("GROUP_RANK", "SLURM_NODEID", "NODE_RANK") if v in os.environ), "")
        self.host = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
        self.seen: dict[int, int] = {}
        self.verdicts = Verdicts()
        self.stopping = threading.Event()

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="cloudddp-pace", daemon=True)
        self.thread.start()
        atexit.register(self.stop)

    def stop(self) -> None:
        """At the interpreter's exit: let the thread leave the store before finalization. A daemon thread that
        comes back from the store's native call (the GIL released) while the interpreter finalizes is ended
        inside C++ code, and the process aborts: a run that ended well would read as failed."""
        self.stopping.set()
        self.thread.join(timeout=5)

    def _run(self) -> None:
        """The thread: nothing it meets may reach ``threading.excepthook`` (where the hang doctor reads a timeout's
        words as a collective's)."""
        dist = sys.modules.get("torch.distributed")
        while dist is None or not dist.is_initialized():
            if self.stopping.wait(self.seconds):
                return
            dist = sys.modules.get("torch.distributed")
        host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        if dist.get_world_size() < 2 or not (host and port and port.isdigit()):
            return
        import datetime

        try:
            store = dist.TCPStore(host, int(port), is_master=False, timeout=datetime.timedelta(seconds=30))
        except Exception as e:  # noqa: BLE001 - the script runs without the watch
            print(f"cloudddp: straggler watch not started: {e!r}"[:300], file=sys.stderr, flush=True)
            return
        self._watch(store, dist.get_rank(), dist.get_world_size())

    def _watch(self, store: Any, rank: int, world: int) -> None:
        seq = 0
        while not self.stopping.wait(self.seconds):
            taken = self.clock.take()
            try:
                if taken is not None:
                    seq += 1
                    mine = Report(rank, taken[0], taken[1], self.node, self.host, seq)
                    store.set(f"{self.prefix}{rank}", json.dumps(mine._asdict()))
                if rank == 0 and not self.stopping.wait(min(0.5, self.seconds / 10)):  # the others' looks
                    self._decide(store, world)
            except Exception:  # noqa: BLE001 - the store gone at the run's end: the watch ends with it
                return

    def _decide(self, store: Any, world: int) -> None:
        reports = {}
        for rank in range(world):
            key = f"{self.prefix}{rank}"
            if store.check([key]):
                report = Report(**json.loads(store.get(key)))
                if report.seq != self.seen.get(rank):  # a rank that stopped stepping is the hang doctor's
                    reports[rank] = report
                    self.seen[rank] = report.seq
        if len(reports) < 2:
            return
        lines = self.verdicts.look(judge(list(reports.values()), self.factor), reports)
        if lines:
            sys.stdout.write("".join(f"{text}\n" for text in lines))
            sys.stdout.flush()


CLOCK = Clock()


def hook(optimizer: ModuleType) -> None:
    """Measure this rank's own work (``torch.optim.optimizer`` has just been imported: ``torch`` is being), and
    watch it from the first step on; nothing without :data:`SETTING`."""
    asked = setting(os.environ.get(SETTING))
    if asked is None:
        return
    watch = Watch(CLOCK, *asked)
    started: list[bool] = []

    def stepped(_optimizer: Any, _args: Any, _kwargs: Any) -> None:
        CLOCK.stepped(time.perf_counter())
        if not started:
            started.append(True)
            watch.start()

    optimizer.register_optimizer_step_post_hook(stepped)
    _wrap_backward(sys.modules["torch._tensor"].Tensor)
    ddp = sys.modules.get("torch.nn.parallel.distributed")
    if ddp is not None and hasattr(ddp.DistributedDataParallel, "_sync_buffers"):
        _wrap_buffer_sync(ddp.DistributedDataParallel)


def _wrap_backward(tensor: type) -> None:
    original = tensor.backward  # type: ignore[attr-defined]

    def backward(self: Any, *args: Any, **kwargs: Any) -> Any:
        CLOCK.backward(time.perf_counter())
        return original(self, *args, **kwargs)

    backward.__wrapped__ = original  # type: ignore[attr-defined]
    backward.__doc__ = original.__doc__
    tensor.backward = backward  # type: ignore[attr-defined]


def _wrap_buffer_sync(ddp: type) -> None:
    original = ddp._sync_buffers  # type: ignore[attr-defined]

    def _sync_buffers(self: Any, *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            CLOCK.waiting(time.perf_counter() - began)

    _sync_buffers.__wrapped__ = original  # type: ignore[attr-defined]
    ddp._sync_buffers = _sync_buffers  # type: ignore[attr-defined]
