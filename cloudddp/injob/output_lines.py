"""A program's output as whole lines, the way the rank launcher copies it: progress bars held, never glued.

A progress bar (tqdm) rewrites its line with ``\\r`` and ends it only when it closes: copied as it comes, its updates
would reach the launcher's log as unfinished lines, which the launcher's own lines and other processes' lines get
glued to, and a traceback printed behind the bar would not start a line. :class:`Lines` turns the program's bytes
into whole lines. It needs nothing but Python's standard library: it is shipped in every code snapshot as
``_cloudddp_lines.py`` beside the launcher (:mod:`cloudddp.injob.shim`), which loads it from there.
"""

from __future__ import annotations

import codecs
import time
from collections.abc import Callable

SHIPPED_AS = "_cloudddp_lines.py"
TRACEBACK = "Traceback (most recent call last):"
PROGRESS_SECONDS = 10.0
"""How often a progress bar that is still running shows its state: a ``\\r`` update is held, not written."""


class Lines:
    """A program's output in, whole lines out. A progress bar (tqdm) rewrites its line with ``\\r`` and ends it only
    when it closes: its updates would reach the launcher's log as unfinished lines, which the launcher's own lines
    and other processes' lines get glued to. Here a line with ``\\r`` updates is written as its latest state only,
    once it ends, and every ``every`` seconds while it runs; a traceback printed behind a bar starts a line."""

    def __init__(self, every: float = PROGRESS_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.every, self.clock = every, clock
        self.partial, self.shown, self.since = "", "", self.clock()

    def feed(self, data: bytes, final: bool = False) -> list[str]:
        """The lines ``data`` completes (each ending in ``\\n``); with ``final``, the unfinished one too."""
        if not self.partial:
            self.since = self.clock()  # a line that starts now is held for `every` from now
        *ended, self.partial = (self.partial + self.decoder.decode(data, final)).split("\n")
        lines = [part for line in ended for part in self._whole(line)]
        if final and self.partial:
            lines += self._whole(self.partial)
            self.partial = ""
        elif "\r" in self.partial:  # keep the latest state only: memory stays bounded while a bar runs
            self.partial = self.partial[max(self.partial.rfind("\r", 0, len(self.partial) - 1), 0) :]
            lines += self.due()
        if ended:
            self.since = self.clock()
        return lines

    def due(self) -> list[str]:
        """A running bar's latest state, when it has been held for ``every`` seconds."""
        state = _latest(self.partial)
        if "\r" not in self.partial or not state or state == self.shown or self.clock() - self.since < self.every:
            return []
        self.shown, self.since = state, self.clock()
        return [state + "\n"]

    def _whole(self, line: str) -> list[str]:
        line = line.removesuffix("\r")  # a \r\n line end
        state, shown, self.shown = _latest(line), self.shown, ""
        if "\r" in line and (state == shown or not state.strip()):
            return []  # the bar's last state is out already, or the bar cleared itself (tqdm's leave=False)
        at = state.find(TRACEBACK)
        return [state[:at] + "\n", state[at:] + "\n"] if at > 0 else [state + "\n"]


def _latest(line: str) -> str:
    """What a terminal would show of a line that ``\\r`` rewrote: its last non-empty part."""
    return next((part for part in reversed(line.split("\r")) if part), "")
