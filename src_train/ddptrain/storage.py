"""Writing a file so that nobody trusts a half-written one: on local disks and on mounted cloud storage.

On a normal filesystem a file is written to a temporary name in the same folder, fsynced, renamed
over the target and the folder fsynced: the target is always the old bytes or the new ones.

Cloud output folders mounted through FUSE (Azure ML's ``rw_mount`` is blob storage behind blobfuse;
gcsfuse and s3fs behave alike) keep only part of that promise: a rename is a copy and a delete, or is
refused, and fsync of a folder (sometimes of a file) fails with EINVAL, ENOTSUP, EPERM, EROFS... Where
the rename is refused the file is written in place instead, and an fsync the mount refuses is skipped.
Either way the bytes are read back and their SHA-256 compared with what was meant to be written, so a
torn copy is caught at once (and removed) instead of being found at the next resume.
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
import sys
from pathlib import Path

# What a mount answers for an operation it does not implement, as opposed to a failed write (EIO, ENOSPC).
REFUSED = frozenset(
    {
        errno.EINVAL,
        errno.ENOTSUP,
        errno.EOPNOTSUPP,
        errno.EPERM,
        errno.EACCES,
        errno.EROFS,
        errno.ENOSYS,
        errno.EBADF,
        errno.ENOTTY,
        errno.EISDIR,
    }
)
_told: set[tuple[Path, str]] = set()  # (folder, what) already warned about: one line each, not one per file


def write_file(path: Path, payload: bytes) -> None:
    """Put ``payload`` in ``path`` (atomically where the filesystem allows it) and check it by its checksum.

    Raises OSError when it could not be written or reads back different: a torn ``path`` is removed, one the
    failure never reached is left as it was.
    """
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        _write_bytes(tmp, payload)
    except OSError:
        _remove(tmp)
        raise
    try:
        os.replace(tmp, path)
    except OSError as e:
        _remove(tmp)
        _tell_once(
            path.parent,
            "rename",
            f"renaming a file into place failed ({e.strerror or e}); writing "
            "files in place there instead (a mounted cloud folder?); checksums still catch torn files",
        )
        try:
            _write_bytes(path, payload)
        except OSError:
            _remove(path)
            raise
    _sync_folder(path.parent)
    if sha256_of(path) != hashlib.sha256(payload).hexdigest():
        _remove(path)
        raise OSError(errno.EIO, f"{path.name} reads back different from what was written (torn write)")


def leftover_temp_files(folder: Path, pattern: str) -> list[Path]:
    """Temporary files of a writer that was killed mid-write, for targets matching the glob ``pattern``."""
    return sorted(folder.glob(f".{pattern}.*.tmp"))


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def _write_bytes(path: Path, payload: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        _fsync(fd, path.parent)
    finally:
        os.close(fd)


def _fsync(fd: int, folder: Path) -> None:
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in REFUSED:
            raise
        _tell_once(folder, "fsync", f"fsync is refused there ({e.strerror}); relying on the mount to flush on close")


def _sync_folder(folder: Path) -> None:
    """Make the rename durable; a mount that cannot open or fsync a folder has nothing to make durable."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError as e:
        if e.errno not in REFUSED:
            raise
        return
    try:
        _fsync(fd, folder)
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass  # the write already failed; a leftover is skipped by its checksum and pruned later


def _tell_once(folder: Path, what: str, message: str) -> None:
    if (folder, what) not in _told:
        _told.add((folder, what))
        print(f"warning: {folder}: {message}", file=sys.stderr, flush=True)
