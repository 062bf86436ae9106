"""gzip of a stream, its deflate work shared by the machine's cores, as ``pigz`` does.

The stream is cut into blocks of :data:`BLOCK_BYTES`; each is deflated on its own thread (zlib releases the GIL),
primed with the 32 KiB before it, so it compresses as well as one long stream does, and ended on a byte boundary
(a sync flush) unless it is the last. The blocks' output, in order, is one deflate stream, inside one gzip member
with the header ``gzip.GzipFile(filename="", mtime=0)`` writes: ``gzip -d``, ``tarfile`` and every other reader
take it as any .gz. The bytes depend on the blocks alone, never on how many threads there are or how the input
arrives, so a snapshot's sha256 stays its name.

Which deflate makes them depends on the stream's length alone. A stream of one block (most code folders) is
Python's zlib's, byte for byte what ``GzipFile`` writes, so those snapshots keep the names they have always had. A
longer one is zlib-ng's (the ``zlib-ng`` package), at the same level: 2 to 3 times faster, as small or smaller.
zlib-ng's bytes may differ between its versions and between x86 and ARM (it promises the data, not the bytes): the
same folder packed there gets another name, and is uploaded once more.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections import deque
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from concurrent.futures import Future

LEVEL = 6
"""gzip's default level, as ``tar czf`` uses."""
BLOCK_BYTES = 1 << 20
WINDOW = 32 * 1024
"""deflate's window: what a block is primed with from the block before it."""
HEADER = b"\x1f\x8b\x08\x00" + bytes(4) + b"\x00\xff"
"""What ``GzipFile(filename="", mtime=0, compresslevel=6)`` writes first: no name, no time, level 6's flags, OS
unknown."""


def threads() -> int:
    """The cores this process may use, at most four (deflate of 1 MiB blocks gains little beyond)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count() or 1
    return max(1, min(4, usable))


def _deflate(library: ModuleType, block: bytes | memoryview, primer: bytes, last: bool) -> tuple[bytes, bytes]:
    """One block, raw deflate, by ``library`` (zlib or zlib-ng's, which have the same interface)."""
    if primer:
        c = library.compressobj(LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS, zlib.DEF_MEM_LEVEL, 0, primer)
    else:
        c = library.compressobj(LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS, zlib.DEF_MEM_LEVEL, 0)
    return c.compress(block), c.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


def _library(only_block: bool) -> ModuleType:
    """The deflate for a stream: Python's zlib for a stream of one block, zlib-ng's for a longer one."""
    if only_block:
        return zlib
    from zlib_ng import zlib_ng  # here: a stream of one block, and a render that packs nothing, need none

    return zlib_ng


class BlockGzip:
    """A gzip writer: ``write`` the stream's bytes, then ``close``; the compressed bytes go to ``out`` in order.
    At most one block per thread is being deflated: memory stays a few blocks."""

    def __init__(self, out: Callable[[bytes], object], workers: int | None = None) -> None:
        from concurrent.futures import ThreadPoolExecutor  # here: a render that finds its snapshot packed needs none

        self.out = out
        self.workers = workers or threads()
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="cloudddp-deflate")
        self.parts: list[memoryview] = []  # what is held, not yet in a block
        self.held = 0
        self.primer = b""
        self.library: ModuleType | None = None  # chosen with the first block: is it the only one?
        self.crc = 0
        self.size = 0
        self.running: deque[Future[tuple[bytes, bytes]]] = deque()
        out(HEADER)

    def write(self, data: bytes | bytearray) -> None:
        """Take ``data``, which must not change afterwards: blocks are deflated from it, copied only where one
        spans two writes."""
        self.parts.append(memoryview(data))
        self.held += len(data)
        while self.held > BLOCK_BYTES:  # a full block is the last only if something follows it
            self._submit(self._take(BLOCK_BYTES), last=False)

    def close(self) -> None:
        """Deflate what is left as the last block and write the gzip trailer (crc32 and size of the stream)."""
        self._submit(self._take(self.held), last=True)
        while self.running:
            self._emit()
        self.pool.shutdown()
        self.out(struct.pack("<II", self.crc, self.size & 0xFFFFFFFF))

    def _take(self, n: int) -> bytes | memoryview:
        """The next ``n`` bytes held."""
        self.held -= n
        if not n:
            return b""
        first = self.parts[0]
        if len(first) >= n:
            if len(first) == n:
                self.parts.pop(0)
            else:
                self.parts[0] = first[n:]
            return first[:n]
        pieces = []
        while n:
            part = self.parts.pop(0)
            if len(part) > n:
                self.parts.insert(0, part[n:])
                part = part[:n]
            pieces.append(part)
            n -= len(part)
        return b"".join(pieces)

    def abandon(self) -> None:
        """Stop without a trailer (the stream failed): the threads end once their blocks are done."""
        self.pool.shutdown(cancel_futures=True)

    def _submit(self, block: bytes | memoryview, *, last: bool) -> None:
        if self.library is None:
            self.library = _library(only_block=last)
        self.crc = self.library.crc32(block, self.crc)
        self.size += len(block)
        self.running.append(self.pool.submit(_deflate, self.library, block, self.primer, last))
        self.primer = bytes(block[-WINDOW:])
        while len(self.running) >= self.workers:
            self._emit()

    def _emit(self) -> None:
        """The oldest block's compressed bytes, out in order."""
        for part in self.running.popleft().result():
            self.out(part)
