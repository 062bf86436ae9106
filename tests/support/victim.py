"""A process that must not be signalled, and a way to show it was not without waiting a fixed time.

The victim blocks SIGTERM and a probe signal (SIGWINCH, numbered above SIGTERM) and takes them one at a time
(``sigwaitinfo``, which gives the lowest-numbered pending signal first), printing each one's name; a SIGTERM ends
it, a SIGKILL ends it silently. :meth:`Victim.signals` proves a negative with a positive signal: it sends the probe
and waits for its answer. A SIGTERM sent before the probe is pending when the probe arrives, so it is taken (and
printed) first; a SIGKILL leaves no answer at all.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

PROBE = signal.SIGWINCH
_SCRIPT = """
import signal, sys

wanted = {signal.SIGTERM, signal.SIGWINCH}
signal.pthread_sigmask(signal.SIG_BLOCK, wanted)
print("ready", flush=True)
while True:
    number = signal.sigwaitinfo(wanted).si_signo
    print(signal.Signals(number).name, flush=True)
    if number == signal.SIGTERM:
        sys.exit(0)
"""


class Victim:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SCRIPT], stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        assert self.proc.stdout is not None
        self._out = self.proc.stdout
        assert self._out.readline().strip() == "ready"  # the signals are blocked: none is lost from here on

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signals(self) -> list[str]:
        """Every signal it got so far, then the probe's answer: ``["SIGWINCH"]`` when nothing reached it; ending with
        ``"(ended)"`` when it is gone (a SIGKILL, or a SIGTERM, which it names first)."""
        seen: list[str] = []
        os.kill(self.pid, PROBE)  # a zombie (ended, not yet reaped) takes it too
        while line := self._out.readline().strip():
            seen.append(line)
            if line == PROBE.name:
                return seen
        self.proc.wait(timeout=30)
        return [*seen, "(ended)"]

    def wait_ended(self, timeout: float = 30) -> list[str]:
        """What it printed until it ended (it must end within ``timeout`` s), and its exit code."""
        code = self.proc.wait(timeout=timeout)
        return [*(line.strip() for line in self._out if line.strip()), f"exit {code}"]

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self._out.close()
