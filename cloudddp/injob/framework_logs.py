"""Metrics from the log files training frameworks write, read inside the job and printed as metric lines.

A Lightning script logs with ``self.log(...)`` into its logger's files (CSVLogger: ``metrics.csv``;
TensorBoardLogger: ``events.out.tfevents.*``); Accelerate's tensorboard tracker and Hugging Face's
TensorBoardCallback write event files too. Nothing of that reaches the job's output, so the in-job launcher
(:mod:`cloudddp.injob.shim`), on global rank 0, runs a :class:`Watcher`: every :data:`EVERY` seconds, and once more
when the program has ended, it looks for such files under the program's working folder and the runtime contract's
folders (:func:`roots`) and prints each new row as a ``CLOUDDDP_METRIC`` line on rank 0's output, which every
backend already reads (:mod:`cloudddp.observe.metrics`).

- ``metrics.csv`` beside an ``hparams.yaml`` or in a ``version_N`` folder (Lightning's CSVLogger): each new row
  once (``step`` and ``epoch`` set the record's, the other non-empty cells are its values). Lightning rewrites the
  file with a wider header when a new column appears; the rows read before are then skipped by count.
- ``events.out.tfevents.*``: the scalars of each new event (``simple_value``, or a scalar tensor) with
  the event's step and wall time; consecutive events of one step make one record. Read with tensorboard's own
  ``EventFileLoader``, which keeps its place in the file; without tensorboard in the job, the launcher says once
  what to install.

What was there before the program started (a resumed run's files, a restart's) is read past, not printed:
each row is printed once per run, by the run that wrote it (rows written in the last seconds before a torchrun
restart are lost, never doubled).

Hugging Face Trainer's printed records (``{'loss': ..., 'epoch': ...}``) are already on rank 0's output: they are
read where the lines are (:mod:`cloudddp.observe.metrics`); its ``trainer_state.json`` repeats them and is not read.

It needs nothing but Python's standard library (and tensorboard for event files, where the job has it): it is
shipped in every code snapshot as ``_cloudddp_logs.py`` next to the in-job launcher, which loads it from there.
"""

from __future__ import annotations

import csv
import importlib
import io
import json
import math
import os
import struct
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

SHIPPED_AS = "_cloudddp_logs.py"
PREFIX = "CLOUDDDP_METRIC "
EVERY = 5.0
"""Seconds between looks for new rows."""
DEPTH = 6
"""How many folders deep a look goes under each root (``lightning_logs/name/version_0/metrics.csv`` is 3)."""
MOST_ENTRIES = 20_000
"""A look stops after this many folder entries: a dataset of small files in the working folder costs no more."""
SKIPPED = frozenset({"__pycache__", "node_modules", "site-packages", ".git", ".venv", "venv"})
FOLDERS = ("CLOUDDDP_OUTPUT_DIR", "CLOUDDDP_MODEL_DIR", "CLOUDDDP_CHECKPOINT_DIR", "CLOUDDDP_TENSORBOARD_DIR")
"""The runtime contract's folders a framework may be told to log into."""
EVENTS = "events.out.tfevents."
INSTALL_TENSORBOARD = (
    f"{SHIPPED_AS}: TensorBoard event files are not read into cloudddp's metrics: tensorboard is not installed in "
    "the job (add `tensorboard` to code.requirements, or log with Lightning's CSVLogger)"
)

Record = dict[str, Any]


def roots(env: Mapping[str, str], cwd: Path) -> list[Path]:
    """Where to look: the working folder, then each contract folder that is set (once each, outer ones first)."""
    found: list[Path] = []
    for place in [cwd, *(Path(env[name]) for name in FOLDERS if env.get(name))]:
        place = place.resolve()
        if not any(place == seen or place.is_relative_to(seen) for seen in found):
            found.append(place)
    return found


def is_csv_log(path: Path) -> bool:
    """A Lightning CSVLogger's file: ``metrics.csv`` beside its ``hparams.yaml`` or in a ``version_N`` folder."""
    return path.name == "metrics.csv" and (
        path.parent.name.startswith("version_") or (path.parent / "hparams.yaml").is_file()
    )


def log_files(places: list[Path]) -> Iterator[Path]:
    """The framework log files under ``places``, at most :data:`DEPTH` folders deep, hidden folders left out."""
    budget = MOST_ENTRIES
    for root in places:
        for folder, dirs, files in os.walk(root):
            budget -= len(dirs) + len(files)
            if budget < 0:
                return
            here = Path(folder)
            depth = len(here.relative_to(root).parts)
            dirs[:] = [] if depth >= DEPTH else [d for d in dirs if d not in SKIPPED and not d.startswith(".")]
            for name in files:
                if name.startswith(EVENTS) or is_csv_log(here / name):
                    yield here / name


def number(text: str) -> float | None:
    """A finite number from a cell, None for an empty or non-numeric one."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def position(value: float) -> int | None:
    """A step or epoch as the integer it is; None for a fraction."""
    return int(value) if float(value).is_integer() else None


def record_of(values: dict[str, float], step: float | None = None, time: float | None = None) -> Record | None:
    """A metric line's object: ``epoch`` (a value that is a whole number) and ``step`` become the record's
    position; None when nothing else is left (a position is no measurement)."""
    record: Record = {}
    if step is not None and position(step) is not None:
        record["step"] = position(step)
    epoch = values.pop("epoch", None)
    if epoch is not None and position(epoch) is not None:
        record["epoch"] = position(epoch)
    if time is not None:
        record["time"] = time
    return {**record, **values} if values else None


class CsvLog:
    """A CSVLogger's ``metrics.csv``, read from where the last look ended."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.header = b""
        self.offset = 0
        self.rows = 0

    def read(self) -> list[Record]:
        with open(self.path, "rb") as f:
            header = f.readline()
            if not header.endswith(b"\n"):
                return []
            skip = 0
            if os.fstat(f.fileno()).st_size < self.offset:  # written afresh: its rows are all new
                self.header, self.rows = b"", 0
            if header != self.header:  # first look, or Lightning rewrote it with a new column
                self.header, self.offset, skip = header, len(header), self.rows
            f.seek(self.offset)
            data = f.read()
        data = data[: data.rfind(b"\n") + 1]  # a row still being written waits for the next look
        self.offset += len(data)
        names = next(csv.reader([header.decode("utf-8", "replace")]))
        rows = list(csv.reader(io.StringIO(data.decode("utf-8", "replace"))))[skip:]
        self.rows += len(rows)
        return [r for r in (self.record(names, row) for row in rows) if r is not None]

    @staticmethod
    def record(names: list[str], row: list[str]) -> Record | None:
        cells = {name: value for name, cell in zip(names, row, strict=False) if (value := number(cell)) is not None}
        return record_of(cells, step=cells.pop("step", None))


class EventLog:
    """A TensorBoard event file, read by tensorboard's ``EventFileLoader`` (which keeps its place in the file)."""

    def __init__(self, path: Path, loader: Any) -> None:
        self.loader = loader(str(path))

    def read(self) -> list[Record]:
        found: list[Record] = []
        step: int | None = None
        values: dict[str, float] = {}
        time = None
        for event in self.loader.Load():
            scalars = {v.tag: x for v in event.summary.value if (x := scalar(v)) is not None}
            if not scalars:
                continue
            if values and event.step != step:
                found.append(record_of(values, step, time) or {})
                values = {}
            step, time = event.step, event.wall_time
            values.update(scalars)
        if values:
            found.append(record_of(values, step, time) or {})
        return [r for r in found if r]


TENSOR_FORMATS = {1: "<f", 2: "<d", 3: "<i", 9: "<q"}
"""The scalar tensor dtypes read (DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64) and their bytes' layout."""


def scalar(value: Any) -> float | None:
    """One summary value's number, None for an image, a histogram, text. ``EventFileLoader`` gives every scalar as
    TensorFlow 2 writes it, a scalar tensor of the ``scalars`` plugin (the ``simple_value`` of PyTorch's
    SummaryWriter or tensorboardX is turned into one)."""
    tensor = value.tensor
    if value.metadata.plugin_data.plugin_name != "scalars" or tensor.tensor_shape.dim:
        return None
    listed = list(tensor.float_val) or list(tensor.double_val) or list(tensor.int_val) or list(tensor.int64_val)
    layout = TENSOR_FORMATS.get(tensor.dtype)
    if listed:
        found = float(listed[0])
    elif layout and len(tensor.tensor_content) == struct.calcsize(layout):
        found = float(struct.unpack(layout, tensor.tensor_content)[0])
    else:
        return None
    return found if math.isfinite(found) else None


def event_loader() -> Any:
    """tensorboard's ``EventFileLoader``, or None where tensorboard is not installed."""
    try:
        return importlib.import_module("tensorboard.backend.event_processing.event_file_loader").EventFileLoader
    except ImportError:
        return None


class Watcher:
    """Looks for framework log files under ``places`` and gives each new row to ``emit`` as a metric object."""

    def __init__(self, places: list[Path], emit: Callable[[Record], None]) -> None:
        self.places = places
        self.emit = emit
        self.logs: dict[Path, CsvLog | EventLog] = {}
        self.warned: set[str] = set()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.keep_looking, name="cloudddp-framework-logs", daemon=True)

    def look(self, *, past: bool = False) -> None:
        """One look: new files are opened, every file read on; with ``past`` (before the program starts) what is
        there is read past, not emitted."""
        for path in log_files(self.places):
            key = path.resolve()
            if key not in self.logs:
                opened = self.open(key)
                if opened is None:
                    continue
                self.logs[key] = opened
        for log in list(self.logs.values()):
            try:
                records = log.read()
            except OSError:
                continue  # rotated away, or not readable yet: the next look tries again
            for record in [] if past else records:
                self.emit(record)

    def open(self, path: Path) -> CsvLog | EventLog | None:
        if not path.name.startswith(EVENTS):
            return CsvLog(path)
        loader = event_loader()
        if loader is None:
            self.warn(INSTALL_TENSORBOARD)
            return None
        return EventLog(path, loader)

    def warn(self, message: str) -> None:
        if message not in self.warned:
            self.warned.add(message)
            print(message, file=sys.stderr, flush=True)

    def safe_look(self, *, past: bool = False) -> None:
        try:
            self.look(past=past)
        except Exception as e:  # noqa: BLE001 - reading logs must never stop training
            self.warn(f"{SHIPPED_AS}: framework logs not read: {type(e).__name__}: {e}")

    def keep_looking(self) -> None:
        while not self.done.wait(EVERY):
            self.safe_look()

    def read_past(self) -> None:
        """Before the program starts: what is already there (a resumed run's logs) was printed by its own run."""
        self.safe_look(past=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """The last look, once the program has ended: what it wrote last is printed before the job ends."""
        self.done.set()
        self.thread.join(timeout=30)
        self.safe_look()


def metric_line(record: Record) -> str:
    return PREFIX + json.dumps(record, separators=(",", ":"))


def watcher(write: Callable[[str], None]) -> Watcher:
    """A watcher of this process's working folder and the contract's folders that writes metric lines."""
    return Watcher(roots(os.environ, Path.cwd()), lambda record: write(metric_line(record)))
