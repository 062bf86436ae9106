"""What a torchrun agent prints about itself, made fit for a person reading the run's log.

An agent stopped by a signal (a cancel, ``limits.max_runtime``) passes it to its ranks, waits for them, and then
raises ``SignalException`` out of ``main()``: its traceback would end the log of a cleanly cancelled run and read
like a crash. It is folded into one line saying what happened. Any other traceback passes unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

TRACEBACK = "Traceback (most recent call last):"


def without_stop_traceback(lines: Iterable[str]) -> Iterator[str]:
    """``lines`` as they come, but a traceback that ends in torchrun's ``SignalException`` as one line."""
    held: list[str] = []
    for line in lines:
        if not held:
            if line.rstrip("\n") == TRACEBACK:
                held.append(line)
            else:
                yield line
            continue
        held.append(line)
        if line[:1] in (" ", "\t"):  # a frame of the traceback
            continue
        if "SignalException" in line and "got signal" in line:
            signal = line.rstrip("\n").rsplit(" ", 1)[-1]
            yield (
                f"torchrun stopped on signal {signal}, after passing it to its processes and waiting for them "
                "(its SignalException traceback is left out: this is how torchrun ends on a stop, not a crash)\n"
            )
        else:
            yield from held
        held = []
    yield from held
