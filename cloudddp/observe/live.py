"""The live metrics table of ``cloudddp metrics RUN -f`` on a terminal: last value, range and a sparkline."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from cloudddp.observe.console import escape, out, printable
from cloudddp.observe.metrics import MetricRecord

BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], width: int = 32) -> str:
    if not values:
        return ""
    values = values[-width:]
    lo, hi = min(values), max(values)
    span = hi - lo or 1.0
    return "".join(BLOCKS[min(len(BLOCKS) - 1, int((v - lo) / span * (len(BLOCKS) - 1) + 0.5))] for v in values)


def position(record: MetricRecord) -> str:
    """``epoch 3  step 120``, each part only when the record knows it."""
    parts = [f"{name} {value}" for name, value in (("epoch", record.epoch), ("step", record.step)) if value is not None]
    return "  ".join(parts) or "a metric line"


class EpochProgress:
    """How many epochs a run has reached, for the attached view's bar, from any script's records: the shared
    script's epoch ends (records with ``epoch_time``) when it reports them, else the epochs seen so far (a
    script's records say which epoch it is in, counted from 0 or 1 alike)."""

    def __init__(self) -> None:
        self.ended: int | None = None
        self.seen: set[int] = set()

    def update(self, record: MetricRecord) -> int | None:
        """The epochs reached after ``record``; None while no record has named an epoch."""
        if record.epoch is not None:
            if "epoch_time" in record.values:
                self.ended = max(self.ended or 0, record.epoch)
            self.seen.add(record.epoch)
        if self.ended is not None:
            return self.ended
        return len(self.seen) or None


def table(history: dict[str, list[float]], last: MetricRecord | None, state: str, run_id: str) -> Any:
    from rich.table import Table

    where = position(last) if last else "waiting for the first metric line"
    t = Table(title=f"{run_id} — {state} — {where}", title_justify="left")
    for column in ("metric", "last", "min", "max", "history"):
        t.add_column(column, justify="right" if column in ("last", "min", "max") else "left")
    for name, values in history.items():
        t.add_row(
            escape(printable(name)), f"{values[-1]:.4g}", f"{min(values):.4g}", f"{max(values):.4g}", sparkline(values)
        )
    return t


def follow_table(records: Iterable[MetricRecord], state: Callable[[], str], run_id: str) -> None:
    """Redraw the table on every record until the stream ends."""
    from rich.live import Live

    history: dict[str, list[float]] = {}
    last = None
    with Live(table(history, last, state(), run_id), console=out(), refresh_per_second=4) as live:
        for record in records:
            last = record
            for name, value in record.values.items():
                history.setdefault(name, []).append(value)
            live.update(table(history, last, state(), run_id))
        live.update(table(history, last, state(), run_id))
