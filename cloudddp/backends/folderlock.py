"""One training per checkpoint folder: a lock file in the folder names the run that holds it and its processes.

Two copies of one training (a second submit of the same job, a recovery launched while the first attempt still
trains) would write the same checkpoints over each other. So the launch of a run takes ``.cloudddp.lock`` in its
checkpoint folder: ``{"run_id", "holders": [{"pid", "start", "boot"}], "since"}``, the holders being the processes
that keep the training going (the launching process at first, then the supervisor and the node groups). The lock
is held while any holder is alive, by pid identity (:class:`~cloudddp.backends.procs.Process`): a lock left by a run
whose processes are all gone (killed, the machine restarted) is taken over, and a pid handed to another process
since does not count. Every read-decide-write happens under ``flock`` of the lock file, so two launches at once
cannot both take it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cloudddp.backends.procs import Process
from cloudddp.errors import UserError
from cloudddp.paths import UnsafeFolder, open_trusted

LOCK_NAME = ".cloudddp.lock"
_FIX = "keep checkpoint.path in folders only you may write"


class FolderHeld(UserError):
    """The checkpoint folder is held by another run whose processes are alive."""

    def __init__(self, folder: Path, holder: dict[str, Any]) -> None:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("since", 0)))
        super().__init__(
            f"the checkpoint folder {folder} is held by run {holder.get('run_id')} (running since {since}): "
            "two copies of one training would overwrite each other's checkpoints",
            hint=f"wait for it to end, or `cloudddp cancel {holder.get('run_id')}`; a variant (other arguments to "
            "train separately) needs its own checkpoint.key or name",
        )
        self.holder = holder


class FolderLock:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / LOCK_NAME

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        """The lock file, opened in the folder the trusted walk reached (:func:`~cloudddp.paths.open_trusted`: a
        link on the way is judged where it points) and itself a regular file of this user's that nobody else may
        write: a lock another user could replace or write names holders of her choosing, or none."""
        folder, _ = open_trusted(self.folder, "checkpoint.path", folder=True, create=True, fix=_FIX)
        try:  # never through a link: in a shared folder it could point at any file of ours, overwritten with {}
            fd = os.open(LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            raise UserError(
                f"{self.path} is a symbolic link: the checkpoint folder's lock must be a file of its own",
                hint=f"remove it (rm {self.path}), and keep checkpoint.path where only you can write",
            ) from None
        finally:
            os.close(folder)
        try:
            _judge_lock(os.fstat(fd), self.path)
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)  # releases the flock

    @staticmethod
    def _read(fd: int) -> dict[str, Any]:
        os.lseek(fd, 0, os.SEEK_SET)
        try:
            data = json.loads(os.read(fd, 1 << 16) or b"{}")
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    @staticmethod
    def _write(fd: int, data: dict[str, Any]) -> None:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(data).encode(), 0)

    @staticmethod
    def alive(data: dict[str, Any]) -> bool:
        """Whether any holder of the lock ``data`` is still the process it recorded."""
        for holder in data.get("holders", []):
            process = Process.from_record(holder.get("pid"), holder) if isinstance(holder, dict) else None
            if process is not None and process.alive():
                return True
        return False

    def holder(self) -> dict[str, Any] | None:
        """The live holder's record, or None when the folder is free."""
        if not self.path.exists():
            return None
        with self._locked() as fd:
            data = self._read(fd)
        return data if data.get("run_id") and self.alive(data) else None

    def acquire(self, run_id: str, holders: list[Process]) -> None:
        """Take the folder for ``run_id``; :class:`FolderHeld` when another run's processes hold it."""
        with self._locked() as fd:
            data = self._read(fd)
            if data.get("run_id") not in (None, run_id) and self.alive(data):
                raise FolderHeld(self.folder, data)
            self._write(fd, {"run_id": run_id, "holders": _records(holders), "since": time.time()})

    def hand_over(self, run_id: str, holders: list[Process]) -> None:
        """Record ``holders`` as the processes holding the folder for ``run_id`` (if the lock still names it)."""
        with self._locked() as fd:
            data = self._read(fd)
            if data.get("run_id") == run_id:
                self._write(fd, {**data, "holders": _records(holders)})

    def release(self, run_id: str) -> None:
        """Free the folder, if ``run_id`` holds it."""
        if not self.path.exists():
            return
        with self._locked() as fd:
            if self._read(fd).get("run_id") == run_id:
                self._write(fd, {})


def _judge_lock(st: os.stat_result, path: Path) -> None:
    """The lock file: a regular file of this user's that nobody else may write."""
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise UnsafeFolder(
            f"the checkpoint folder's lock {path} is not a file of yours that only you may write (uid {st.st_uid}, "
            f"mode {stat.S_IMODE(st.st_mode):o}): whoever could write it chooses which run holds the folder",
            hint=f"if nobody else wrote it, remove it (rm {path}); {_FIX}",
        )


def _records(holders: list[Process]) -> list[dict[str, Any]]:
    return [{"pid": p.pid, **p.record()} for p in holders]
