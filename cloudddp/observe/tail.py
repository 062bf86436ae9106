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
    partial = [b""] * len(paths)
    while True:
        done = finished() if follow else True  # read the flag before draining, so nothing is lost
        got = False
        for i, path in enumerate(paths):
            for chunk in _chunks(path, offsets[i]):
                offsets[i] += len(chunk)
                got = True
                lines, partial[i] = _split(partial[i] + chunk)
                for line in lines:
                    yield i, line.decode("utf-8", errors="replace")
        if done and not got:
            for i, rest in enumerate(partial):
                if rest:  # the last line, unterminated (or ended by a lone \r)
                    yield i, rest.removesuffix(b"\r").decode("utf-8", errors="replace")
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


def _split(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Complete lines, and the rest; a final ``\r`` waits, as it may be the first half of ``\r\n``."""
    held = buffer.endswith(b"\r")
    *lines, rest = _NEWLINE.split(buffer[:-1] if held else buffer)
    return lines, (rest + b"\r" if held else rest)
