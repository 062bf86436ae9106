"""``run.watch()`` for notebooks: a status line and a live-updating plot, redrawn in place until the run ends."""

from __future__ import annotations

import html
import time
from collections.abc import Iterator
from typing import Any, Protocol

from cloudddp.errors import UserError
from cloudddp.observe.console import line_tag
from cloudddp.observe.metrics import MetricRecord
from cloudddp.observe.plotting import plot_metrics

LOG_LINES = 20


class Watched(Protocol):
    """What the widget needs of a run (:class:`cloudddp.api.Run` is one): its id, status, events and an end."""

    run_id: str

    @property
    def warnings(self) -> list[str]:
        """What its person should know besides its state (its plan's warnings, what its end says)."""

    def status(self) -> Any:
        """The run's status (with ``state`` and ``_repr_html_``)."""

    def events(self, follow: bool = False, all_ranks: bool = False) -> Iterator[Any]:
        """Metric records and log lines as they come."""

    def wait(self, timeout: float | None = None, poll: float = 1.0) -> Any:
        """Block until the run ends; its status."""


def watch(run: Watched, poll: float = 1.0) -> Any:
    """Draw ``run``'s status, its output and a live plot of its metrics in the notebook until it ends; its status.
    Outside a notebook (a script, a plain Python shell) the same follows as text lines."""
    if not _in_a_notebook():
        return _watch_as_text(run)
    try:
        import matplotlib.pyplot as plt
        from IPython.display import HTML, display
    except ImportError:
        raise UserError("run.watch() needs IPython and matplotlib: pip install 'cloudddp[notebook]'") from None
    records: list[Any] = []
    lines: list[str] = []
    status = run.status()
    status_handle = display(HTML(status._repr_html_()), display_id=True)
    shown = list(run.warnings)
    if shown:
        display(HTML(warnings_html(shown)))
    log_handle = display(HTML(""), display_id=True)  # the script's own output, while it reports no metrics
    fig = plt.figure(figsize=(12, 7))
    plt.close(fig)  # drawn only through the display handle, not again at the end of the cell
    plot_handle = None
    last_draw = 0.0
    for event in run.events(follow=True):
        if not isinstance(event, MetricRecord):
            lines = [*lines[-(LOG_LINES - 1) :], f"[{line_tag(event)}] {event.text}"]
            if not records:
                log_handle.update(HTML(f"<pre>{html.escape(chr(10).join(lines))}</pre>"))
            continue
        records.append(event)
        if time.monotonic() - last_draw >= poll:
            plot_metrics(records, title=run.run_id, figure=fig)
            if plot_handle is None:
                plot_handle = display(fig, display_id=True)
            else:
                plot_handle.update(fig)
            status_handle.update(HTML(run.status()._repr_html_()))
            last_draw = time.monotonic()
    status = run.wait(poll=0.2)
    if records:
        plot_metrics(records, title=f"{run.run_id} ({status.state.value})", figure=fig)
        if plot_handle is None:
            display(fig)
        else:
            plot_handle.update(fig)
    status_handle.update(HTML(status._repr_html_() + warnings_html(_new(run, shown, status.message))))
    return status


def warnings_html(warnings: list[str]) -> str:
    """``warnings`` as a notebook shows them under a run's status (empty: nothing)."""
    items = "".join(f"<li style='color:#b45309'>warning: {html.escape(w)}</li>" for w in warnings)
    return f"<ul>{items}</ul>" if items else ""


def _in_a_notebook() -> bool:
    """A kernel that draws HTML and figures (Jupyter, VS Code), not a terminal shell or a plain interpreter."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def _watch_as_text(run: Watched) -> Any:
    """The run's warnings, its metric records and its first process's output as lines on stdout, then its end state
    and what its end adds to the warnings."""
    shown = list(run.warnings)
    for warning in shown:
        print(f"warning: {warning}", flush=True)
    for event in run.events(follow=True):
        if isinstance(event, MetricRecord):
            values = "  ".join(f"{k}={v:.4g}" for k, v in event.values.items())
            print(f"epoch {event.epoch}  {values}" if event.epoch is not None else values, flush=True)
        else:
            print(f"[{line_tag(event)}] {event.text}", flush=True)
    status = run.wait(poll=0.2)
    print(f"{status.state.value} {run.run_id}: {status.message}", flush=True)
    for warning in _new(run, shown, status.message):
        print(f"warning: {warning}", flush=True)
    return status


def _new(run: Watched, shown: list[str], message: str) -> list[str]:
    """The run's warnings not yet shown, nor said by its status's message (where its end's note already is)."""
    return [w for w in run.warnings if w not in shown and w not in message]
