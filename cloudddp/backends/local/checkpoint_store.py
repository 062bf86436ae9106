"""A checkpoint folder on this machine as a :class:`~cloudddp.backends.checkpoints.store.CheckpointStore`: what a run
moving to or from the local backend carries (:mod:`cloudddp.backends.checkpoints.carry`).

Every file is reached through descriptors walked from the folder's own, one name at a time with ``O_NOFOLLOW``
(:func:`_walk`): a link anywhere inside the folder (planted in a shared target, or swapped in for a listed file of the
source) is refused and named, never followed, so a carry reads nothing and writes nothing outside its folder. Only
regular files are read. A file is written under a hidden temporary name in its own folder (which a carry, like the
script's own checks, leaves out) and renamed into place, by descriptor, once whole, so a copy cut short never sits
under the real name. New files are 0600 and new folders 0700, like the rest of cloudddp's private files.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from cloudddp.backends.checkpoints.store import CHUNK, StoredFile, chunks, posix_name, unsafe
from cloudddp.errors import CloudDDPError
from cloudddp.observe.console import safe_name

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class LocalCheckpoints:
    """The checkpoint folder ``folder`` on this machine."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @property
    def location(self) -> str:
        return str(self.folder)

    def files(self) -> list[StoredFile]:
        """Every regular file under the folder; links are left out (a link may point anywhere on this machine)."""
        if not self.folder.is_dir():
            return []
        found = []
        for root, _, names, fd in os.fwalk(self.folder, follow_symlinks=False):
            here = Path(root).relative_to(self.folder)
            for name in names:
                with contextlib.suppress(FileNotFoundError):
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    if stat.S_ISREG(info.st_mode):
                        found.append(StoredFile((here / name).as_posix(), info.st_size))
        return sorted(found, key=lambda f: f.path)

    @contextlib.contextmanager
    def reader(self, path: str) -> Iterator[IO[bytes]]:
        with self._opened(path, os.O_RDONLY) as f:
            yield f

    def takes(self, path: str) -> bool:
        return posix_name(path)

    def write(self, path: str, stream: IO[bytes]) -> None:
        parts = self._parts(path)
        with self._walk(parts[:-1], create=True) as folder:
            temporary = f".carry-{secrets.token_hex(8)}"  # short: a 255-byte name has no room for more
            fd = os.open(
                temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder
            )
            try:
                with os.fdopen(fd, "wb") as out:
                    for block in chunks(stream):
                        out.write(block)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(temporary, parts[-1], src_dir_fd=folder, dst_dir_fd=folder)  # a link there is replaced
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temporary, dir_fd=folder)

    def sha256(self, path: str) -> str:
        digest = hashlib.sha256()
        with self._opened(path, os.O_RDONLY) as f:
            while block := f.read(CHUNK):
                digest.update(block)
        return digest.hexdigest()

    def remove(self, path: str) -> None:
        parts = self._parts(path)
        with self._walk(parts[:-1], create=False) as folder, contextlib.suppress(FileNotFoundError):
            os.unlink(parts[-1], dir_fd=folder)

    @contextlib.contextmanager
    def _opened(self, path: str, flags: int) -> Iterator[IO[bytes]]:
        """The regular file ``path``, opened without following a link at any part of it."""
        parts = self._parts(path)
        with self._walk(parts[:-1], create=False) as folder:
            try:
                fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
            except OSError as e:
                raise self._refused(path, e) from None
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise CloudDDPError(f"{self._named(path)} is not a regular file: it is not carried")
            os.set_blocking(fd, True)
            yield f

    @contextlib.contextmanager
    def _walk(self, parts: list[str], *, create: bool) -> Iterator[int]:
        """A descriptor of the folder ``parts`` under the checkpoint folder, each part opened with ``O_NOFOLLOW``
        (made 0700 where missing and ``create``)."""
        if create:
            _folders(self.folder)
        fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for i, part in enumerate(parts):
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o700, dir_fd=fd)
                try:
                    inner = os.open(part, _DIR, dir_fd=fd)
                except OSError as e:
                    raise self._refused("/".join(parts[: i + 1]), e) from None
                os.close(fd)
                fd = inner
            yield fd
        finally:
            os.close(fd)

    def _refused(self, path: str, e: OSError) -> CloudDDPError:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            return CloudDDPError(f"{self._named(path)} is a link (or not a folder): a carry never follows one")
        return CloudDDPError(f"{self._named(path)}: {e.strerror}")

    def _named(self, path: str) -> str:
        return f"{safe_name(path)} in the checkpoint folder {safe_name(str(self.folder))}"

    def _parts(self, path: str) -> list[str]:
        if unsafe(path):
            raise CloudDDPError(f"{safe_name(path)!r} is not a file name inside the checkpoint folder {self.folder}")
        return path.split("/")


def _folders(folder: Path) -> None:
    """``folder`` and each missing folder above it, made 0700 (``mkdir(parents=True)`` makes those above it with
    the umask's mode)."""
    missing = []
    while not folder.is_dir():
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
