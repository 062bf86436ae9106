"""The live metrics table of ``cloudddp metrics RUN -f`` on a terminal: last value, range and a sparkline."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from cloudddp.observe.console import out
from cloudddp.observe.metrics import MetricRecord

BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], width: int = 32) -> str:
    if not values:
        return ""
    values = values[-width:]
    lo, hi = min(values), max(values)
    span = hi - lo or 1.0
    return "".join(BLOCKS[min(len(BLOCKS) - 1, int((v - lo) / span * (len(BLOCKS) - 1) + 0.5))] for v in values)


def table(history: dict[str, list[float]], last: MetricRecord | None, state: str, run_id: str) -> Any:
    from rich.table import Table

    where = f"epoch {last.epoch}  step {last.step}" if last else "waiting for the first metric line"
    t = Table(title=f"{run_id} — {state} — {where}", title_justify="left")
    for column in ("metric", "last", "min", "max", "history"):
        t.add_column(column, justify="right" if column in ("last", "min", "max") else "left")
    for name, values in history.items():
        t.add_row(name, f"{values[-1]:.4g}", f"{min(values):.4g}", f"{max(values):.4g}", sparkline(values))
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
