"""A local run's node groups, made to outlive their supervisor.

Each node is one torchrun agent, started under a small shell (the group's leader) that writes the agent's exit code
to a file when it ends, with the agent's output going to a file of the run (not a pipe): so when the supervisor is
killed (the OOM killer, a closed session), the node trains on and nothing it prints or how it ends is lost, and a new
supervisor adopts it (:mod:`cloudddp.backends.local.supervisor` ``--adopt``): it reads the output on from where the
last one stopped and learns the exit code from the file, although the node is not its child.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cloudddp.backends.procs import Process

WRAPPER = 'trap : TERM INT; "$@"; code=$?; printf "%s\\n" "$code" > "$0.tmp" && mv -f "$0.tmp" "$0"; exit "$code"'
"""``sh -c WRAPPER EXIT_FILE ARGV...``: run ARGV, then record its exit status in EXIT_FILE. A stop's SIGTERM reaches
the whole group: the shell waits for the agent (the trap, not an ignore, so the agent still gets the signal's
default) and records how it ended."""


LOST_CODE = -9
"""The exit code of a node that ended without a record: its whole group was killed (nothing else ends the shell
that records it), as when its machine goes."""


def wrapped(argv: Sequence[str], exit_file: Path) -> list[str]:
    """``argv`` under the shell that records its exit code in ``exit_file``."""
    return ["/bin/sh", "-c", WRAPPER, str(exit_file), *argv]


def recorded_exit(exit_file: Path) -> int | None:
    """The exit code the shell recorded (negative: killed by that signal, as subprocess reports it); None when the
    node has not ended, or its shell was killed before it could record anything."""
    try:
        code = int(exit_file.read_text().strip())
    except (OSError, ValueError):
        return None
    return -(code - 128) if code > 128 else code


@dataclass
class Node:
    """One node group as a supervisor sees it: its own child, or adopted from a supervisor that is gone."""

    index: int
    process: Process | None
    """The group's leader (the shell), as recorded when it started."""
    exit_file: Path
    child: subprocess.Popen[bytes] | None = None
    """Set when this supervisor started the node: then it is waited for, not only looked at."""

    def running(self) -> bool:
        if self.child is not None:
            return self.child.poll() is None
        return self.process is not None and self.process.alive()

    def ended(self) -> bool:
        """Whether the agent has ended: its shell recorded how (the record is the shell's last act, so the shell
        may still be exiting), or the group is gone."""
        return recorded_exit(self.exit_file) is not None or not self.running()

    def exit_code(self) -> int | None:
        """How the agent ended: what its shell recorded; else, for a child whose shell was killed, the signal; None
        while it runs, or for an adopted node that ended without a record (its whole group was killed)."""
        recorded = recorded_exit(self.exit_file)
        if recorded is not None or self.running():
            return recorded
        return self.child.returncode if self.child is not None else None

    def signal_group(self, sig: int) -> None:
        """``sig`` to every process of the group (the shell, the agent), if the group is still this node's."""
        if self.running() and self.process is not None:
            self.process.signal_group(sig)
