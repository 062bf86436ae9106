"""Recognising unchanged files by their stat, as git's index does, so nothing is read twice for nothing.

A file counts as unchanged when its size, mtime_ns, ctime_ns, inode and mode all match what was
recorded. One trap remains, which git calls "racy": a file written in the same clock tick as the
moment it was recorded can change again without its mtime moving. So a record vouches for a file
only if the file's mtime is older than the recording by :data:`RACY_NS`; a younger file is checked by
its content (:func:`file_sha256`) and recorded again once it is old enough.

The records are small JSON files under ``$CLOUDDDP_HOME``, replaced atomically: concurrent writers
never leave a torn file behind, and a lost race only costs a later re-read.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

RACY_NS = 2_000_000_000
"""Files modified this close to a recording are checked by content (2 s also covers FAT's 2 s mtimes)."""
READ_CHUNK = 1 << 20


class Stamp(NamedTuple):
    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    mode: int

    @classmethod
    def of(cls, st: os.stat_result) -> Stamp:
        # tuple.__new__, not cls(...): a named tuple's own __new__ is a Python call, and this is one per file
        return tuple.__new__(cls, (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode))

    def racy(self, recorded_ns: int) -> bool:
        """Whether a change after ``recorded_ns`` could have left this stamp as it is."""
        return self.mtime_ns >= recorded_ns - RACY_NS


def racy_files(files: Iterable[tuple[str, Stamp]], recorded_ns: int) -> set[str]:
    """The paths among ``files`` whose stamps are racy at ``recorded_ns`` (:meth:`Stamp.racy`, a folder at once)."""
    since = recorded_ns - RACY_NS
    return {rel for rel, stamp in files if stamp.mtime_ns >= since}


_PACKED = struct.Struct("<QqqQQ")  # size, mtime_ns, ctime_ns, inode, mode: 64 bits each
_WRAPPED, _WRAP = struct.Struct("<5Q"), (1 << 64) - 1  # the same bytes, for each field cut to its low 64 bits


def stamps_sha256(files: Sequence[tuple[str, Stamp]]) -> str:
    """One sha256 of a folder's files (path, stamp): what a record keeps to recognise the folder unchanged. Packed
    in binary, not written out in JSON: for 20,000 files a JSON list took longer to write, and again to read, than
    a small folder takes to pack."""
    digest = hashlib.sha256("\0".join([rel for rel, _ in files]).encode("utf-8", "surrogateescape"))
    try:
        packed = [_PACKED.pack(*stamp) for _, stamp in files]
    except struct.error:  # a time before 1677 or after 2262 needs more than 64 bits of ns: cut to 64, as git does
        packed = [_WRAPPED.pack(*[field & _WRAP for field in stamp]) for _, stamp in files]
    digest.update(b"".join(packed))
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(READ_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def key_of(*parts: Any) -> str:
    """A file name for a record, from whatever identifies it (a folder, its rules)."""
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()


def read_record(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_record(path: Path, data: dict[str, Any]) -> None:
    """Replace ``path`` atomically; a record that cannot be written is only a missed shortcut."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))  # dumps, not dump: one C-encoded string
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)


class DigestCache:
    """sha256 of each file of one folder, remembered by stamp in ``<dir>/<key of folder>.json``."""

    def __init__(self, folder: Path, directory: Path) -> None:
        self.folder = folder
        self.path = directory / f"{key_of('files', str(folder))}.json"
        self.entries: dict[str, list[Any]] = (read_record(self.path) or {}).get("files", {})
        self.used: dict[str, list[Any]] = {}
        self.changed = False

    def digest(self, rel: str, now_ns: int) -> str:
        """The file's sha256: from the record when its stamp vouches for it, else read (and recorded)."""
        path = self.folder / rel
        stamp = Stamp.of(path.stat())
        entry = self.entries.get(rel)
        if entry is not None and len(entry) == 3 and Stamp(*entry[0]) == stamp and not stamp.racy(entry[1]):
            self.used[rel] = entry
            return str(entry[2])
        digest = file_sha256(path)
        self.used[rel] = [list(stamp), now_ns, digest]
        self.changed = True
        return digest

    def save(self) -> None:
        """Keep the records of the files asked for this time (files gone from the folder drop out)."""
        if self.changed or self.used.keys() != self.entries.keys():
            write_record(self.path, {"folder": str(self.folder), "files": self.used})
