"""Copying a node's console file into the run's log, so that a supervisor that takes over copies on exactly where
the last one stopped: nothing twice, nothing lost.

The agent writes everything it prints (its own messages, its ranks' lines with torchrun's ``[rank<r>]:``
prefix) to ``ranks/node<i>.console``, raw. The supervisor copies it line by line, secrets redacted, into
``logs/node<i>.log`` (and rank 0's metric records into ``metrics.jsonl``), and after each line writes a cursor:
how many bytes of the console it has read and how long the log and metrics files are. The cursor is one fixed-width
``pwrite``, so a supervisor killed at any moment leaves either the cursor before a line or the one after it; the
next supervisor cuts the log and metrics files back to the cursor's lengths (dropping a line written after the last
cursor) and reads the console on from the cursor's offset.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from cloudddp.backends.local.masking import mask

CHUNK_BYTES = 256 * 1024
POLL_SECONDS = 0.05
_FORMAT = b"%020d %020d %020d\n"


class Cursor:
    """Bytes of the console read, of the node log and of ``metrics.jsonl`` written, kept in a file."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            values = [int(v) for v in os.pread(self._fd, len(_FORMAT % (0, 0, 0)), 0).split()]
        except ValueError:
            values = []
        self.console, self.log, self.metrics = values if len(values) == 3 else (0, 0, 0)

    def save(self) -> None:
        os.pwrite(self._fd, _FORMAT % (self.console, self.log, self.metrics), 0)

    def close(self) -> None:
        os.close(self._fd)


class Output:
    """An append-only file written through here, its length counted into the cursor."""

    def __init__(self, path: Path, length: int) -> None:
        with open(path, "ab") as f:  # created if missing; cut back to what the cursor says was written
            if f.tell() > length:
                f.truncate(length)
        self._file = open(path, "ab")  # noqa: SIM115 - closed by close()
        self.length = min(length, self._file.tell())

    def write(self, text: str) -> None:
        data = text.encode("utf-8", errors="replace")
        self._file.write(data)
        self._file.flush()
        self.length += len(data)

    def close(self) -> None:
        self._file.close()


def copy_lines(
    console: Path,
    cursor: Cursor,
    handle: Callable[[str], None],
    running: Callable[[], bool],
    poll: float = POLL_SECONDS,
    secrets: Sequence[bytes] = (),
) -> None:
    """Hand each line of ``console`` past the cursor to ``handle`` (which writes through :class:`Output` s and
    updates the cursor's lengths), saving the cursor after each; until ``running()`` is false and the file is
    drained (its last line handed over even without a newline). Linear in the bytes: each chunk is searched once.
    Each of ``secrets`` in a line is masked in the console once the line is handed over (:mod:`.masking`)."""
    pending = bytearray()
    with contextlib.ExitStack() as stack:
        f = stack.enter_context(open(console, "rb"))
        writer = os.open(console, os.O_RDWR) if secrets else None
        if writer is not None:
            stack.callback(os.close, writer)

        def done(line: bytes) -> None:
            if writer is not None:
                mask(writer, cursor.console, line, list(secrets))
            cursor.console += len(line)
            cursor.save()

        f.seek(cursor.console)
        while True:
            ended = not running()  # read before draining, so nothing written before the end is missed
            chunk = f.read(CHUNK_BYTES)
            if chunk:
                searched = len(pending)
                pending += chunk
                start = 0
                while (end := pending.find(b"\n", max(start, searched))) >= 0:
                    line = bytes(pending[start : end + 1])
                    start = end + 1
                    handle(line.decode("utf-8", errors="replace"))
                    done(line)
                del pending[:start]
            elif ended:
                if pending:
                    handle(pending.decode("utf-8", errors="replace") + "\n")
                    done(bytes(pending))
                return
            else:
                time.sleep(poll)
