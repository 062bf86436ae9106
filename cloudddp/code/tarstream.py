"""A deterministic .tar.gz of files on disk, written in one streaming pass and hashed on the way.

The tar bytes are exactly what ``tarfile`` (PAX format) writes for the same members, as cloudddp's code archives
always were: regular files only, mtime 0, uid/gid 0, no owner names, mode 0644 or 0755. Their gzip is
:mod:`~cloudddp.code.blockgzip`'s (no name or timestamp in the header), which is byte for byte
``gzip.GzipFile(mtime=0, compresslevel=6)``'s for a tar stream of one deflate block (1 MiB: most code folders).
Going through ``tarfile`` for every member costs more than compressing a small file (and importing it, more than
packing a hundred), so the common member (an ASCII name of at most 100 characters) gets its header from fields
written out here, which a test holds to ``tarfile``'s bytes; any other member goes through ``tarfile``. Small
writes are gathered before they reach gzip, whose bytes do not depend on how its input is cut. gzip (on threads of
its own), the archive's sha256 and the write to disk run beside the packing (:class:`_Compressing`), so compressing
overlaps listing and reading the files, as ``tar czf``'s separate gzip process does. The per-file loop (open, read,
header, padding) runs in C, with the GIL released, where the optional extension ``_tarloop`` (``_tarloop.c``) is
built; each member it does not take (a long or non-ASCII name, bytes given as data, a hashed or large file, a file
it could not read in full) goes through :func:`_add` here, which is the reference and, without the extension, does
every member: the bytes are the same either way.
"""

from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING, NamedTuple

from cloudddp.code.blockgzip import BlockGzip
from cloudddp.errors import UserError

try:
    from cloudddp.code import _tarloop
except ImportError:  # installed without a C compiler: _add packs every member, to the same bytes
    _tarloop = None  # type: ignore[assignment]

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


Fields = tuple[str, str, int, bool, bool, bytes | None]
"""A :class:`Member`'s fields in a plain tuple, as a folder's files are handed over: built in one step, where a
named tuple's ``__new__`` is a Python call per file."""


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


# The fields every common member's header shares, as ``tarfile`` writes them (a test holds each header to its
# bytes): mode and uid/gid, mtime, and after the checksum the type, an empty link name, the ustar magic and empty
# owner names, device numbers and prefix. Their part of the checksum counts the checksum field as spaces.
_MODES = {executable: b"%07o\0" % (0o755 if executable else 0o644) + b"0000000\0" * 2 for executable in (False, True)}
_MTIME = b"%011o\0" % 0
_REST = b"0" + bytes(100) + b"ustar\x0000" + bytes(BLOCK - 265)
_SUMS = {executable: sum(mode) + sum(_MTIME) + sum(_REST) + 8 * ord(" ") for executable, mode in _MODES.items()}
_PADDING = [bytes(n) for n in range(BLOCK)]


def header(name: str, executable: bool, size: int) -> bytes:
    """The header block(s) of one member, byte for byte as ``tarfile`` writes them."""
    if len(name) > 100 or not name.isascii() or size >= 8**11:  # tarfile adds a PAX header for these
        return _tarfile_header(name, executable, size)
    raw, size_field = name.encode("ascii"), b"%011o\0" % size
    # The sum of these bytes, in C: the low half of their adler32 is 1 + that sum (below 65521, adler32's modulus).
    checksum = _SUMS[executable] + (zlib.adler32(size_field, zlib.adler32(raw)) & 0xFFFF) - 1
    return b"".join(
        (raw, _PADDING[100 - len(raw)], _MODES[executable], size_field, _MTIME, b"%06o\0 " % checksum, _REST)
    )


class _Compressing:
    """The tar stream's way out: gzip, sha256 and the write to disk, in a thread of their own (gzip's deflate on
    threads of its own). zlib, sha256 and file writes release the GIL, so the archive is compressed while the next
    files are listed and read; the queue holds at most :data:`QUEUED` chunks, so memory stays bounded whatever the
    folder holds."""

    def __init__(self, out: IO[bytes]) -> None:
        import queue
        import threading

        self.out = out
        self.hash = hashlib.sha256()
        self.size = 0
        self.error: BaseException | None = None
        self.queue: queue.Queue[bytes | bytearray | None] = queue.Queue(QUEUED)
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

    def _run(self) -> None:
        ended = False
        gz = BlockGzip(self.write)
        try:
            while (chunk := self.queue.get()) is not None:
                gz.write(chunk)
            ended = True
            gz.close()
        except BaseException as e:  # noqa: BLE001 - raised again in the packing thread
            gz.abandon()
            self.error = e
            while not ended and self.queue.get() is not None:  # keep taking, so the packer never blocks
                pass


class _Batched:
    """The tar stream on its way to gzip: headers, padding and small files gathered into large writes."""

    def __init__(self, sink: _Compressing) -> None:
        self.sink = sink
        self.buffer = bytearray()
        self.sent = 0  # bytes handed to the sink

    def write(self, data: bytes) -> None:
        if not self.buffer and len(data) >= CHUNK:
            self.sent += len(data)
            self.sink.put(data)
            return
        self.buffer += data
        if len(self.buffer) >= CHUNK:
            self.flush()

    def flush(self) -> None:
        if self.buffer:
            self.sent += len(self.buffer)
            self.sink.put(self.buffer)  # handed over, not copied: the next writes go to a new buffer
            self.buffer = bytearray()


def write_targz(out: IO[bytes], members: Iterable[Fields]) -> Written:
    """Write the archive of ``members`` (each a :class:`Member` or its :data:`Fields`, in the order given) to
    ``out``."""
    listed = members if isinstance(members, list) else list(members)
    compressing = _Compressing(out)
    digests = {}
    try:
        tar = _Batched(compressing)
        done = 0
        while done < len(listed):
            if _tarloop is not None:
                done = _tarloop.pack(tar.buffer, listed, done, CHUNK)  # as many as it takes, up to a full chunk
                if len(tar.buffer) >= CHUNK:
                    tar.flush()
                    continue
                if done == len(listed):
                    break
            m = listed[done]
            digest = _add(tar, m)
            if digest is not None:
                digests[m[0]] = digest
            done += 1
        tar.write(bytes(2 * BLOCK))  # the end-of-archive marker, then zeros up to a whole record, as tarfile does
        tar.write(bytes(-(tar.sent + len(tar.buffer)) % RECORD))
        tar.flush()
    finally:
        compressing.close()
    return Written(compressing.hash.hexdigest(), compressing.size, digests)


def _add(tar: _Batched, m: Fields) -> str | None:
    """One member: its header, its bytes, padding to a whole block; the sha256 of its bytes if asked. A file
    that fits one chunk (most do) is read in one call and goes into the batch with its header and padding."""
    name, path, size, executable, hashed, data = m
    head, padding = header(name, executable, size), _PADDING[-size % BLOCK]
    if data is not None:
        tar.write(head + data + padding)
        return None
    fd = os.open(path, os.O_RDONLY)  # no file object: most members are small, their overhead is the cost
    try:
        if size > CHUNK:
            return _add_chunked(tar, fd, path, size, hashed, head)
        data = os.read(fd, size)
        while len(data) < size:
            data += _rest(fd, path, size - len(data))
    finally:
        os.close(fd)
    batch = tar.buffer
    batch += head
    batch += data
    batch += padding
    if len(batch) >= CHUNK:
        tar.flush()
    return hashlib.sha256(data).hexdigest() if hashed else None


def _add_chunked(tar: _Batched, fd: int, path: str, size: int, hashed: bool, head: bytes) -> str | None:
    """A member bigger than a chunk, read and handed on a chunk at a time."""
    tar.write(head)
    digest = hashlib.sha256()
    left = size
    while left:
        chunk = _rest(fd, path, min(CHUNK, left))
        if hashed:
            digest.update(chunk)
        tar.write(chunk)
        left -= len(chunk)
    tar.write(_PADDING[-size % BLOCK])
    return digest.hexdigest() if hashed else None


def _rest(fd: int, path: str, size: int) -> bytes:
    """Up to ``size`` more bytes of the file (a short read is not the end); none at all: it shrank."""
    chunk = os.read(fd, size)
    if not chunk:
        raise UserError(f"{path} shrank while it was being packaged", hint="package it again")
    return chunk
