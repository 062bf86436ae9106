"""A deterministic .tar.gz of files on disk, written in one streaming pass and hashed on the way.

The bytes are exactly what ``tarfile`` (PAX format) inside ``gzip.GzipFile(mtime=0, compresslevel=6)``
writes for the same members, as cloudddp's code archives always were: regular files only, mtime 0,
uid/gid 0, no owner names, mode 0644 or 0755, no name or timestamp in the gzip header. Going through
``tarfile`` for every member costs more than compressing a small file, so the common member (an ASCII
name of at most 100 characters) gets its header from a template that ``tarfile`` itself made; any other
member goes through ``tarfile``. Small writes are gathered before they reach zlib, whose deflate stream
does not depend on how its input is cut.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING, NamedTuple

from cloudddp.errors import UserError

if TYPE_CHECKING:
    import gzip
    import tarfile

CHUNK = 1 << 20
BLOCK = 512  # tarfile.BLOCKSIZE: a render that finds its snapshot packed already imports neither tarfile nor gzip
RECORD = 20 * BLOCK  # tarfile.RECORDSIZE


class Member(NamedTuple):
    """One file of the archive: its name there, and where its bytes come from. This module's records are named
    tuples: a render that finds its snapshot packed uses neither, and a dataclass costs ~1 ms to define."""

    name: str  # inside the archive
    path: str  # on disk ("" for a member given as data)
    size: int  # bytes taken from the file: its size when it was listed
    executable: bool
    hashed: bool = False  # also report the sha256 of the bytes taken (see Written.digests)
    data: bytes | None = None  # the member's bytes, when it is not a file

    @classmethod
    def of_bytes(cls, name: str, data: bytes) -> Member:
        return cls(name, "", len(data), executable=False, data=data)


class Written(NamedTuple):
    """The archive written: its sha256 and size, and the sha256 of each member that asked for it."""

    sha256: str  # of the .tar.gz
    size: int  # bytes of the .tar.gz
    digests: dict[str, str]  # member name -> sha256 of its bytes, for hashed members


def _tarinfo(name: str, executable: bool, size: int) -> tarfile.TarInfo:
    import tarfile

    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o755 if executable else 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _tarfile_header(name: str, executable: bool, size: int) -> bytes:
    """The header block(s) ``TarFile.addfile`` writes (PAX extended headers included, when needed)."""
    import tarfile

    return _tarinfo(name, executable, size).tobuf(tarfile.PAX_FORMAT, tarfile.ENCODING, "strict")


@functools.cache
def _template() -> tuple[bytes, bytes, bytes, int]:
    """What every common member's header shares, cut from one ``tarfile`` wrote: the uid/gid, mtime and trailing
    fields, and their part of the checksum (which counts its own field as spaces)."""
    template = _tarfile_header("", False, 0)
    uid_gid, mtime, rest = template[108:124], template[136:148], template[156:]
    return uid_gid, mtime, rest, sum(uid_gid) + sum(mtime) + sum(rest) + 8 * ord(" ")


_MODES = {False: b"%07o\0" % 0o644, True: b"%07o\0" % 0o755}


def header(name: str, executable: bool, size: int) -> bytes:
    """The header block(s) of one member, byte for byte as ``tarfile`` writes them."""
    if len(name) > 100 or not name.isascii() or size >= 8**11:  # tarfile adds a PAX header for these
        return _tarfile_header(name, executable, size)
    uid_gid, mtime, rest, fixed_sum = _template()
    raw, mode, size_field = name.encode("ascii"), _MODES[executable], b"%011o\0" % size
    checksum = fixed_sum + sum(raw) + sum(mode) + sum(size_field)
    return b"".join((raw.ljust(100, b"\0"), mode, uid_gid, size_field, mtime, b"%06o\0 " % checksum, rest))


class _HashingWriter:
    """The compressed stream on its way to disk, hashed and counted."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self.hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        self.size += len(data)
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


class _Batched:
    """The tar stream on its way to gzip: headers, padding and small files gathered into large writes."""

    def __init__(self, sink: gzip.GzipFile) -> None:
        self.sink = sink
        self.buffer = bytearray()
        self.offset = 0

    def write(self, data: bytes) -> None:
        self.offset += len(data)
        if not self.buffer and len(data) >= CHUNK:
            self.sink.write(data)
            return
        self.buffer += data
        if len(self.buffer) >= CHUNK:
            self.flush()

    def flush(self) -> None:
        if self.buffer:
            self.sink.write(self.buffer)
            self.buffer.clear()


def write_targz(out: IO[bytes], members: Iterable[Member]) -> Written:
    """Write the archive of ``members`` (in the order given) to ``out``."""
    import gzip

    hashed = _HashingWriter(out)
    digests = {}
    with gzip.GzipFile(filename="", fileobj=hashed, mode="wb", mtime=0, compresslevel=6) as gz:
        tar = _Batched(gz)
        for m in members:
            digest = _add(tar, m)
            if digest is not None:
                digests[m.name] = digest
        tar.write(bytes(2 * BLOCK))  # the end-of-archive marker, then zeros up to a whole record, as tarfile does
        tar.write(bytes(-tar.offset % RECORD))
        tar.flush()
    return Written(hashed.hash.hexdigest(), hashed.size, digests)


def _add(tar: _Batched, m: Member) -> str | None:
    """One member: its header, its bytes, padding to a whole block; the sha256 of its bytes if asked."""
    tar.write(header(m.name, m.executable, m.size))
    digest = hashlib.sha256() if m.hashed else None
    if m.data is not None:
        tar.write(m.data)
        tar.write(bytes(-m.size % BLOCK))
        return None
    fd = os.open(m.path, os.O_RDONLY)  # no file object: most members are small, their overhead is the cost
    try:
        left = m.size
        while left:
            chunk = os.read(fd, min(CHUNK, left))
            if not chunk:
                raise UserError(f"{m.path} shrank while it was being packaged", hint="package it again")
            if digest is not None:
                digest.update(chunk)
            tar.write(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    tar.write(bytes(-m.size % BLOCK))
    return digest.hexdigest() if digest is not None else None
