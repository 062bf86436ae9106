"""A checkpoint folder on this machine as a :class:`~cloudddp.backends.checkpoints.store.CheckpointStore`: what a run
moving to or from the local backend carries (:mod:`cloudddp.backends.checkpoints.carry`).

A file is written under a hidden temporary name in its own folder (which a carry, like the script's own checks,
leaves out) and renamed into place once whole, so a copy cut short never sits under the real name. New files are
0600 and new folders 0700, like the rest of cloudddp's private files.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from cloudddp.backends.checkpoints.store import CHUNK, StoredFile, chunks, unsafe
from cloudddp.errors import CloudDDPError


class LocalCheckpoints:
    """The checkpoint folder ``folder`` on this machine."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @property
    def location(self) -> str:
        return str(self.folder)

    def files(self) -> list[StoredFile]:
        """Every regular file under the folder; links are left out (a link may point anywhere on this machine)."""
        found = []
        for root, dirs, names in os.walk(self.folder):
            here = Path(root)
            dirs[:] = [name for name in dirs if not (here / name).is_symlink()]
            for name in names:
                path = here / name
                if path.is_file() and not path.is_symlink():
                    found.append(StoredFile(path.relative_to(self.folder).as_posix(), path.stat().st_size))
        return sorted(found, key=lambda f: f.path)

    @contextlib.contextmanager
    def reader(self, path: str) -> Iterator[IO[bytes]]:
        with self._path(path).open("rb") as f:
            yield f

    def write(self, path: str, stream: IO[bytes]) -> None:
        final = self._path(path)
        _folders(final.parent)
        temporary = final.with_name(f".{final.name}.{secrets.token_hex(4)}.carry")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                for block in chunks(stream):
                    out.write(block)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, final)
        finally:
            temporary.unlink(missing_ok=True)

    def sha256(self, path: str) -> str:
        digest = hashlib.sha256()
        with self._path(path).open("rb") as f:
            while block := f.read(CHUNK):
                digest.update(block)
        return digest.hexdigest()

    def _path(self, path: str) -> Path:
        if unsafe(path):
            raise CloudDDPError(f"{path!r} is not a file name inside the checkpoint folder {self.folder}")
        return self.folder / path


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
