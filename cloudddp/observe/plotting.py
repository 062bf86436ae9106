"""Charts of a run's metrics (matplotlib, the ``notebook`` extra): one panel per kind of metric."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cloudddp.errors import UserError
from cloudddp.observe.metrics import MetricRecord

# Panels: which metrics share axes, and the y label with its unit.
PANELS = (
    ("loss", ("train_loss", "test_loss"), "loss (cross-entropy)"),
    ("accuracy", ("train_acc", "test_acc"), "accuracy (fraction correct)"),
    ("learning rate", ("lr",), "learning rate"),
    ("throughput", ("images_per_sec",), "images/s"),
    ("epoch time", ("epoch_time",), "seconds per epoch"),
)


def x_axis(records: Sequence[MetricRecord]) -> str:
    """What the charts' x axis counts: optimizer steps when the records number them, else epochs (an own
    script that reports per epoch), else the metric lines in order."""
    if any(r.step is not None for r in records):
        return "step (optimizer steps, all ranks)"
    if any(r.epoch is not None for r in records):
        return "epoch"
    return "metric line"


def _series(records: Sequence[MetricRecord], axis: str) -> dict[str, tuple[list[float], list[float]]]:
    series: dict[str, tuple[list[float], list[float]]] = {}
    for i, r in enumerate(records):
        at = r.step if axis.startswith("step") else r.epoch if axis == "epoch" else None
        x = float(at if at is not None else i)
        for name, value in r.values.items():
            xs, ys = series.setdefault(name, ([], []))
            xs.append(x)
            ys.append(value)
    return series


def plot_metrics(
    records: Sequence[MetricRecord], *, title: str = "", path: str | Path | None = None, figure: Any = None
) -> Any:
    try:
        import matplotlib

        if path is not None and figure is None:
            matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError("plots need matplotlib: pip install 'cloudddp[notebook]'") from None
    axis = x_axis(records)
    series = _series(records, axis)
    known = {n for _, names, _ in PANELS for n in names}
    panels = [(t, [n for n in names if n in series], label) for t, names, label in PANELS]
    panels = [p for p in panels if p[1]]
    panels += [(name, [name], name) for name in sorted(series) if name not in known]
    if not panels:
        raise UserError("this run has no metrics yet")
    fig = figure or plt.figure(figsize=(6 * min(2, len(panels)), 3.6 * ((len(panels) + 1) // 2)))
    fig.clear()
    cols = min(2, len(panels))
    for i, (panel_title, names, ylabel) in enumerate(panels, 1):
        ax = fig.add_subplot((len(panels) + cols - 1) // cols, cols, i)
        for name in names:
            xs, ys = series[name]
            ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=name)
        ax.set_title(panel_title)
        ax.set_xlabel(axis)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig
