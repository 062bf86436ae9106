"""Step times measured on finished runs, kept so the next estimate of the same job on the same size uses them.

A finished run's metric records give its step time: the shared script reports ``epoch_time`` (seconds of
training in the epoch) at every epoch's end, with the optimizer step it reached, so one epoch's step time is
``epoch_time / optimizer steps in the epoch``; the median over the epochs after the first (which pays for
warm-up) is kept. A script that reports no ``epoch_time`` but numbers its steps gives ``wall time of its
processes / last step`` instead, which includes start-up and so is an upper bound (the basis says so).

The store is one small JSON file, ``$CLOUDDDP_HOME/step_times.json``, keyed by

    <job key>|<size>|<nodes>x<processes per node>

where the job key is the job's name, program and arguments *without* ``--epochs`` (more epochs of the same
training take as long per step; another batch size or model does not), and the size is what the run ran on
(an instance type, a VM size, ``local:cpu`` / ``local:cuda``). The newest measurement of a key wins.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cloudddp.catalog.bill import Bill
from cloudddp.catalog.model import StepTime
from cloudddp.observe.metrics import MetricRecord
from cloudddp.paths import home


def size_key(job: str, size: str, nodes: int, processes_per_node: int | None) -> str:
    return f"{job}|{size}|{nodes}x{processes_per_node or '?'}"


@dataclass(frozen=True)
class Measured:
    """One run's step time, and how it was measured."""

    step_s: float
    how: str
    run_id: str = ""
    steps: int | None = None
    """Optimizer steps the run took (its last step), when it numbers them."""
    steps_per_epoch: float | None = None
    epochs: int | None = None
    images_per_s: float | None = None
    """All processes together, as the shared script reports ``images_per_sec``."""
    measured_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measured:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def step_time(self, epochs: int | None) -> StepTime:
        """As an estimate's step time for a job of ``epochs`` epochs (the steps it implies, where it can)."""
        when = time.strftime("%Y-%m-%d", time.localtime(self.measured_at)) if self.measured_at else "earlier"
        steps: float | None = None
        if self.steps_per_epoch and epochs:
            steps = self.steps_per_epoch * epochs
        elif self.steps and (epochs is None or epochs == self.epochs):
            steps = self.steps
        return StepTime(self.step_s, f"measured on run {self.run_id} ({when}): {self.how}", steps)


def measure(records: Iterable[MetricRecord], ran_s: float | None = None) -> Measured | str:
    """The step time in a finished run's metric records (``ran_s``: how long its processes ran), or why none."""
    records = [r for r in records if r.step is not None]
    if not records:
        return "the run reported no metric record with a step number"
    ends = sorted((r for r in records if "epoch_time" in r.values), key=lambda r: r.step or 0)
    first = min(records, key=lambda r: r.step or 0)
    last = max(records, key=lambda r: r.step or 0)
    fresh = first.epoch in (None, 1)  # started from scratch, not resumed from a checkpoint
    samples: list[tuple[float, int]] = []  # (step time, steps in the epoch)
    previous: int | None = 0 if fresh else None
    for r in ends:
        step = r.step or 0
        if previous is not None and step > previous:
            samples.append((r.values["epoch_time"] / (step - previous), step - previous))
        previous = step
    images = [r.values["images_per_sec"] for r in ends if "images_per_sec" in r.values]
    epochs = max((r.epoch for r in ends if r.epoch is not None), default=None)
    if samples:
        import statistics  # ~4 ms to import (fractions, decimal): only when a measurement is summarised

        kept = samples[1:] if len(samples) > 1 else samples
        return Measured(
            step_s=statistics.median(s for s, _ in kept),
            how=f"median over {len(kept)} epoch(s) of epoch_time / optimizer steps in the epoch"
            + (" (the first epoch, warm-up, left out)" if len(samples) > 1 else ""),
            steps=last.step if fresh else None,
            steps_per_epoch=statistics.median(n for _, n in kept),
            epochs=epochs if fresh else None,
            images_per_s=statistics.median(images[1:] or images) if images else None,
        )
    if ran_s and fresh and last.step:
        return Measured(
            step_s=ran_s / last.step,
            steps=last.step,
            epochs=last.epoch,
            steps_per_epoch=last.step / last.epoch if last.epoch else None,
            how=f"wall time of the run's processes ({ran_s:.0f} s) / its last step ({last.step}): "
            "includes start-up, so an upper bound",
        )
    return "no epoch_time in the metric records, and no wall time with a step count from a run started from scratch"


class StepStore:
    """The measured step times of this machine: ``$CLOUDDDP_HOME/step_times.json``."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or home() / "step_times.json"

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, key: str) -> Measured | None:
        found = self._read().get(key)
        return Measured.from_dict(found) if isinstance(found, dict) else None

    def for_shape(self, job: str, nodes: int, processes_per_node: int | None) -> dict[str, Measured]:
        """The measurements of job ``job`` at this shape, by size (lower case)."""
        out = {}
        for key, value in self._read().items():
            parts = key.split("|")
            if (
                len(parts) == 3
                and parts[0] == job
                and parts[2] == f"{nodes}x{processes_per_node or '?'}"
                and isinstance(value, dict)
            ):
                out[parts[1].lower()] = Measured.from_dict(value)
        return out

    def put(self, key: str, measured: Measured) -> None:
        with self._locked():
            data = self._read()
            data[key] = measured.to_dict()
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
            os.replace(tmp, self.path)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.path.with_name(self.path.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield


def keep_measured(run_id: str, step_key: str, bill: Bill, records: Iterable[MetricRecord]) -> dict[str, Any]:
    """Measure finished run ``run_id`` from its metric ``records`` and final ``bill``, keep the step time under
    the run's size and shape, and say what was kept (or why nothing): what a run's info records as
    ``measured``."""
    found = measure(records, bill.ran_s)
    key = size_key(step_key, bill.size, bill.nodes, bill.processes_per_node)
    if isinstance(found, str):
        return {"none": found, "key": key}
    found = Measured(**{**found.to_dict(), "run_id": run_id, "measured_at": time.time()})
    StepStore().put(key, found)
    return {**found.to_dict(), "key": key}
