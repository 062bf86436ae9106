"""Following growing text files, as ``tail -f`` does, until the writer says it is done."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

POLL_SECONDS = 0.05


def follow_lines(
    paths: Sequence[Path], *, follow: bool, finished: Callable[[], bool], poll: float = POLL_SECONDS
) -> Iterator[tuple[int, str]]:
    """``(index of the file, line)`` for every complete line; with ``follow``, wait for more until
    ``finished()`` is true, then drain what is left. Files that do not exist yet are waited for."""
    offsets = [0] * len(paths)
    partial = [""] * len(paths)
    while True:
        done = finished() if follow else True  # read the flag before draining, so nothing is lost
        got = False
        for i, path in enumerate(paths):
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    f.seek(offsets[i])
                    chunk = f.read()
                    offsets[i] = f.tell()
            except FileNotFoundError:
                continue
            if not chunk:
                continue
            got = True
            *lines, partial[i] = (partial[i] + chunk).split("\n")
            for line in lines:
                yield i, line
        if done and not got:
            for i, rest in enumerate(partial):
                if rest:
                    yield i, rest
            return
        if not got:
            time.sleep(poll)
