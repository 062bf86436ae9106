"""``run.watch()`` for notebooks: a status line and a live-updating plot, redrawn in place until the run ends."""

from __future__ import annotations

import html
import time
from typing import TYPE_CHECKING, Any

from .errors import UserError
from .metrics import MetricRecord
from .plotting import plot_metrics

if TYPE_CHECKING:
    from .api import Run
    from .backends.base import RunStatus


LOG_LINES = 20


def watch(run: Run, poll: float = 1.0) -> RunStatus:
    try:
        import matplotlib.pyplot as plt
        from IPython.display import HTML, display
    except ImportError:
        raise UserError("run.watch() needs IPython and matplotlib: pip install 'cloudddp[notebook]'") from None
    records: list[Any] = []
    lines: list[str] = []
    status = run.status()
    status_handle = display(HTML(status._repr_html_()), display_id=True)
    log_handle = display(HTML(""), display_id=True)  # the script's own output, while it reports no metrics
    fig = plt.figure(figsize=(12, 7))
    plt.close(fig)  # drawn only through the display handle, not again at the end of the cell
    plot_handle = None
    last_draw = 0.0
    for event in run.events(follow=True):
        if not isinstance(event, MetricRecord):
            lines = [*lines[-(LOG_LINES - 1) :], f"[{event.source}] {event.text}"]
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
    status_handle.update(HTML(status._repr_html_()))
    return status
