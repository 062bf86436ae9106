"""Signals only to our own processes: each pid is recorded with its start time and the boot it ran in.

Shared by the processes cloudddp starts on this machine (the local backend's supervisor and node agents, the
recovery watcher). A pid in ``status.json`` or a chain file may belong to another process by the time someone
reads it: after a reboot, or once the process has exited and the kernel handed the number out again. So a pid
is recorded with its start time (``/proc/<pid>/stat`` field 22, clock ticks since boot) and the machine's boot
id, and a signal goes only to a process that still matches both, through a pidfd opened before the check (so
the pid cannot change hands between the check and the signal). Pids <= 1 are never signalled: 0 and -1 mean a
whole group or every process we may signal. A process we may not signal (another user's) is not ours, so it
is not "alive" either.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def boot_id() -> str | None:
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return None


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` from field 3 (state) on; the command name before it may hold spaces and parentheses."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def start_time(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot; None when there is no such process."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


@dataclass(frozen=True)
class Process:
    """One process as it was when it was recorded."""

    pid: int
    start: int
    boot: str

    @classmethod
    def of(cls, pid: int) -> Process | None:
        """The running process ``pid`` (None when it is gone or /proc cannot say)."""
        start, boot = start_time(pid), boot_id()
        return cls(pid, start, boot) if pid > 1 and start is not None and boot is not None else None

    @classmethod
    def from_record(cls, pid: Any, record: Any) -> Process | None:
        """From ``status.json``: the pid and its ``{"start", "boot"}``; None for anything else (an old or damaged
        record names no process we can verify, so nothing is signalled on its word)."""
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1 or not isinstance(record, dict):
            return None
        start, boot = record.get("start"), record.get("boot")
        if not isinstance(start, int) or not isinstance(boot, str):
            return None
        return cls(pid, start, boot)

    def record(self) -> dict[str, Any]:
        return {"start": self.start, "boot": self.boot}

    def current(self) -> bool:
        """Whether ``pid`` still names this process (same boot, same start time)."""
        return self.pid > 1 and boot_id() == self.boot and start_time(self.pid) == self.start

    def alive(self) -> bool:
        """Running (not a zombie), ours to signal, and still this process; a child of ours that has exited is
        reaped here."""
        if self.pid <= 1:
            return False
        try:
            waited, _ = os.waitpid(self.pid, os.WNOHANG)
            if waited == self.pid:
                return False
        except ChildProcessError:
            pass
        try:
            os.kill(self.pid, 0)
        except (ProcessLookupError, PermissionError):  # gone, or not ours to signal: not our run's process
            return False
        fields = _stat_fields(self.pid)
        if not fields:
            return False
        return fields[0] != "Z" and self.current()

    def signal(self, sig: int) -> bool:
        """Send ``sig`` if ``pid`` is still this process; False when it is not, or is gone, or is not ours."""
        if self.pid <= 1 or boot_id() != self.boot:
            return False
        try:
            fd = os.pidfd_open(self.pid)
        except (ProcessLookupError, PermissionError):
            return False
        try:
            if start_time(self.pid) != self.start:  # the pidfd holds the process: this check cannot go stale
                return False
            signal.pidfd_send_signal(fd, sig)
            return True
        except (ProcessLookupError, PermissionError):
            return False
        finally:
            os.close(fd)

    def signal_group(self, sig: int) -> bool:
        """Send ``sig`` to the process group this process leads (it was started in a session of its own).

        While its leader runs, the group is signalled only if the leader is still this process. Once the leader
        has exited the group may live on (ranks outlive their agent); no other process can take its id while
        a member remains, so the group is signalled, if it still exists, in the same boot only."""
        if self.pid <= 1 or boot_id() != self.boot:
            return False
        leader = start_time(self.pid)
        if leader is not None and leader != self.start:
            return False  # the number now belongs to another process
        try:
            os.killpg(self.pid, sig)
            return True
        except (ProcessLookupError, PermissionError):
            return False
