"""What a torchrun agent prints about itself, made fit for a person reading the run's log.

An agent stopped by a signal (a cancel, ``limits.max_runtime``) passes it to its ranks, waits for them, and then
raises ``SignalException`` out of ``main()``: its traceback would end the log of a cleanly cancelled run and read
like a crash. When the stop was asked for, it is folded into one line saying what happened; a signal nobody here
sent (a person killing the agent) keeps its traceback, as does any other.
"""

from __future__ import annotations

from collections.abc import Callable

from cloudddp.injob.output_lines import TRACEBACK


class StopTracebackFolder:
    """Fed a node's output line by line, gives back the lines to record: a traceback is held until its last
    line shows whether it is torchrun's ``SignalException`` (folded into one line) or anything else (passed on
    whole). Push-style, so the supervisor can feed it from its console copier; :meth:`flush` at the end gives
    back a traceback the output stopped inside. ``expected()`` says whether the agent was asked to stop."""

    def __init__(self, expected: Callable[[], bool]) -> None:
        self.held: list[str] = []
        self.expected = expected

    def feed(self, line: str) -> list[str]:
        if not self.held:
            if line.rstrip("\n") == TRACEBACK:
                self.held.append(line)
                return []
            return [line]
        self.held.append(line)
        if line[:1] in (" ", "\t"):  # a frame of the traceback
            return []
        held, self.held = self.held, []
        if "SignalException" in line and "got signal" in line and self.expected():
            signal = line.rstrip("\n").rsplit(" ", 1)[-1]
            return [
                f"torchrun stopped on signal {signal}, after passing it to its processes and waiting for them "
                "(its SignalException traceback is left out: this is how torchrun ends on a stop, not a crash)\n"
            ]
        return held

    def flush(self) -> list[str]:
        held, self.held = self.held, []
        return held
