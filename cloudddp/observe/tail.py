"""Following growing text files, as ``tail -f`` does, until the writer says it is done.

Files are read in bounded chunks and lines handed out as they are found, so a log or metrics file of
any size streams in constant memory (plus the longest line). Lines end at ``\n``, ``\r\n`` or a lone
``\r`` (progress bars), as Python's universal newlines have it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

POLL_SECONDS = 0.05
CHUNK_BYTES = 256 * 1024
_NEWLINE = re.compile(rb"\r\n|\r|\n")


def follow_lines(
    paths: Sequence[Path], *, follow: bool, finished: Callable[[], bool], poll: float = POLL_SECONDS
) -> Iterator[tuple[int, str]]:
    """``(index of the file, line)`` for every complete line; with ``follow``, wait for more until
    ``finished()`` is true, then drain what is left. Files that do not exist yet are waited for."""
    offsets = [0] * len(paths)
    splitters = [LineSplitter() for _ in paths]
    while True:
        done = finished() if follow else True  # read the flag before draining, so nothing is lost
        got = False
        for i, path in enumerate(paths):
            for chunk in _chunks(path, offsets[i]):
                offsets[i] += len(chunk)
                got = True
                for line in splitters[i].feed(chunk):
                    yield i, line.decode("utf-8", errors="replace")
        if done and not got:
            for i, splitter in enumerate(splitters):
                rest = splitter.rest()
                if rest is not None:  # the last line, unterminated (or ended by a lone \r)
                    yield i, rest.decode("utf-8", errors="replace")
            return
        if not got:
            time.sleep(poll)


def _chunks(path: Path, offset: int) -> Iterator[bytes]:
    """What the file holds past ``offset``, a chunk at a time (nothing if it does not exist yet)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            while chunk := f.read(CHUNK_BYTES):
                yield chunk
    except FileNotFoundError:
        return


class LineSplitter:
    """Bytes in, complete lines out, in time linear in the bytes: each chunk is searched for line ends once,
    so a line longer than a chunk is never searched again (appending to the unfinished line and searching
    all of it per chunk made a 32 MB line take seconds). A final ``\r`` waits: it may be half of ``\r\n``."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        start_search = len(self._buffer) - 1 if self._buffer.endswith(b"\r") else len(self._buffer)
        self._buffer += chunk
        lines: list[bytes] = []
        start = 0
        for end in _NEWLINE.finditer(self._buffer, start_search):
            if end.group() == b"\r" and end.end() == len(self._buffer):
                break
            lines.append(bytes(self._buffer[start : end.start()]))
            start = end.end()
        if start:
            del self._buffer[:start]
        return lines

    def rest(self) -> bytes | None:
        """The unfinished last line (a lone final ``\r`` ends it), None when there is none."""
        if not self._buffer:
            return None
        rest = bytes(self._buffer).removesuffix(b"\r")
        self._buffer.clear()
        return rest
