"""A deterministic .tar.gz of files on disk, written in one streaming pass and hashed on the way.

The bytes are exactly what ``tarfile`` (PAX format) inside ``gzip.GzipFile(mtime=0, compresslevel=6)``
writes for the same members, as cloudddp's code archives always were: regular files only, mtime 0,
uid/gid 0, no owner names, mode 0644 or 0755, no name or timestamp in the gzip header. Going through
``tarfile`` for every member costs more than compressing a small file, so the common member (an ASCII
name of at most 100 characters) gets its header from a template that ``tarfile`` itself made; any other
member goes through ``tarfile``. Small writes are gathered before they reach zlib, whose deflate stream
does not depend on how its input is cut. gzip, the archive's sha256 and the write to disk run in a thread of
their own (:class:`_Compressing`), so compressing overlaps listing and reading the files, as ``tar czf``'s
separate gzip process does.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING, NamedTuple

from cloudddp.errors import UserError

if TYPE_CHECKING:
    import tarfile

CHUNK = 1 << 20
BLOCK = 512  # tarfile.BLOCKSIZE: a render that finds its snapshot packed already imports neither tarfile nor gzip
RECORD = 20 * BLOCK  # tarfile.RECORDSIZE
QUEUED = 2  # chunks of the tar stream (1 to 2 MiB each) waiting for gzip


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
_MODE_SUMS = {executable: sum(field) for executable, field in _MODES.items()}
_PADDING = [bytes(n) for n in range(BLOCK)]


def header(name: str, executable: bool, size: int) -> bytes:
    """The header block(s) of one member, byte for byte as ``tarfile`` writes them."""
    if len(name) > 100 or not name.isascii() or size >= 8**11:  # tarfile adds a PAX header for these
        return _tarfile_header(name, executable, size)
    uid_gid, mtime, rest, fixed_sum = _template()
    raw, size_field = name.encode("ascii"), b"%011o\0" % size
    checksum = fixed_sum + sum(raw) + _MODE_SUMS[executable] + sum(size_field)
    return b"".join(
        (raw.ljust(100, b"\0"), _MODES[executable], uid_gid, size_field, mtime, b"%06o\0 " % checksum, rest)
    )


class _Compressing:
    """The tar stream's way out: gzip, sha256 and the write to disk, in a thread of their own. zlib, sha256 and
    file writes release the GIL, so the archive is compressed while the next files are listed and read; the
    queue holds at most :data:`QUEUED` chunks, so memory stays bounded whatever the folder holds."""

    def __init__(self, out: IO[bytes]) -> None:
        import gzip
        import queue
        import threading

        self.out = out
        self.hash = hashlib.sha256()
        self.size = 0
        self.error: BaseException | None = None
        self.queue: queue.Queue[bytes | bytearray | None] = queue.Queue(QUEUED)
        self.gzip = gzip.GzipFile(filename="", fileobj=self, mode="wb", mtime=0, compresslevel=6)
        self.thread = threading.Thread(target=self._run, name="cloudddp-targz", daemon=True)
        self.thread.start()

    def put(self, data: bytes | bytearray) -> None:
        """Hand ``data`` (no longer to be changed) to the thread; its failure, if it failed, is raised here."""
        if self.error is not None:
            raise self.error
        self.queue.put(data)

    def close(self) -> None:
        """End the stream and wait for the thread: the gzip trailer is written when this returns."""
        self.queue.put(None)
        self.thread.join()
        if self.error is not None:
            raise self.error

    def write(self, data: bytes) -> int:
        """Where gzip writes (in the thread): the compressed bytes, hashed and counted on their way to ``out``."""
        self.hash.update(data)
        self.size += len(data)
        return self.out.write(data)

    def flush(self) -> None:
        self.out.flush()

    def _run(self) -> None:
        ended = False
        try:
            with self.gzip as gz:
                while (chunk := self.queue.get()) is not None:
                    gz.write(chunk)
                ended = True
        except BaseException as e:  # noqa: BLE001 - raised again in the packing thread
            self.error = e
            while not ended and self.queue.get() is not None:  # keep taking, so the packer never blocks
                pass


class _Batched:
    """The tar stream on its way to gzip: headers, padding and small files gathered into large writes."""

    def __init__(self, sink: _Compressing) -> None:
        self.sink = sink
        self.buffer = bytearray()
        self.offset = 0

    def write(self, data: bytes) -> None:
        self.offset += len(data)
        if not self.buffer and len(data) >= CHUNK:
            self.sink.put(data)
            return
        self.buffer += data
        if len(self.buffer) >= CHUNK:
            self.flush()

    def flush(self) -> None:
        if self.buffer:
            self.sink.put(self.buffer)  # handed over, not copied: the next writes go to a new buffer
            self.buffer = bytearray()


def write_targz(out: IO[bytes], members: Iterable[Member]) -> Written:
    """Write the archive of ``members`` (in the order given) to ``out``."""
    compressing = _Compressing(out)
    digests = {}
    try:
        tar = _Batched(compressing)
        for m in members:
            digest = _add(tar, m)
            if digest is not None:
                digests[m.name] = digest
        tar.write(bytes(2 * BLOCK))  # the end-of-archive marker, then zeros up to a whole record, as tarfile does
        tar.write(bytes(-tar.offset % RECORD))
        tar.flush()
    finally:
        compressing.close()
    return Written(compressing.hash.hexdigest(), compressing.size, digests)


def _add(tar: _Batched, m: Member) -> str | None:
    """One member: its header, its bytes, padding to a whole block; the sha256 of its bytes if asked. A file
    that fits one chunk (most do) is read in one call and written with its header and padding in one."""
    head, padding = header(m.name, m.executable, m.size), _PADDING[-m.size % BLOCK]
    if m.data is not None:
        tar.write(head + m.data + padding)
        return None
    fd = os.open(m.path, os.O_RDONLY)  # no file object: most members are small, their overhead is the cost
    try:
        if m.size <= CHUNK:
            data = os.read(fd, m.size)
            while len(data) < m.size:
                data += _rest(fd, m.path, m.size - len(data))
            tar.write(head + data + padding)
            return hashlib.sha256(data).hexdigest() if m.hashed else None
        tar.write(head)
        digest = hashlib.sha256()
        left = m.size
        while left:
            chunk = _rest(fd, m.path, min(CHUNK, left))
            if m.hashed:
                digest.update(chunk)
            tar.write(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    tar.write(padding)
    return digest.hexdigest() if m.hashed else None


def _rest(fd: int, path: str, size: int) -> bytes:
    """Up to ``size`` more bytes of the file (a short read is not the end); none at all: it shrank."""
    chunk = os.read(fd, size)
    if not chunk:
        raise UserError(f"{path} shrank while it was being packaged", hint="package it again")
    return chunk
