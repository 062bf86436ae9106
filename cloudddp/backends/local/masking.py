"""Secret values taken out of the raw files of a local run while they are written, not only when the run ends.

torchrun writes each rank's output to files of its own (``ranks/node<i>/<run>/attempt_<n>/<rank>/stdout.log``) and
the agent's console (``ranks/node<i>.console``) gets the same lines: both raw, as the job printed them. They are
private to the job's user, but a run that lives for days (or whose supervisor is killed) would keep a secret on disk
all that time. So the supervisor overwrites each secret value, in every form it may be printed in, with ``*`` of the
same length, in place (``pwrite``): the offsets torchrun writes at stay valid. A rank file is masked a moment after
its lines appear (:data:`SETTLE_SECONDS`), once torchrun's tee thread, which copies them to the console, has read
them; the console is masked by the supervisor's copier itself, right after it has copied a line, so no reader of
ours ever sees a half-masked value.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

CHUNK_BYTES = 1 << 22
SETTLE_SECONDS = 1.0


def byte_forms(forms: Iterable[str]) -> list[bytes]:
    """The secret forms (:func:`~cloudddp.spec.secrets.redaction_forms`) as bytes, longest first."""
    return sorted({form.encode("utf-8") for form in forms if form}, key=len, reverse=True)


_SGR = rb"(?:(?:\x1b|\\u001b|\\x1b|\\033)\[[0-9;:]*m)*"
"""Colour sequences (raw, JSON- or repr-escaped) a secret may be split by and still read whole on a terminal, as
:func:`cloudddp.spec.secrets.redact` knows them."""


def mask(fd: int, offset: int, data: bytes, forms: list[bytes]) -> None:
    """Overwrite each of ``forms`` found in ``data`` (the file's bytes at ``offset``) with ``*`` in the file, also
    where colour sequences split it (the whole span then)."""
    split = b"\x1b" in data or b"1b[" in data or b"033[" in data
    for form in forms:
        if split:
            pattern = _SGR.join(re.escape(form[i : i + 1]) for i in range(len(form)))
            spans = [m.span() for m in re.finditer(pattern, data)]
        else:
            spans, start = [], 0
            while (found := data.find(form, start)) >= 0:
                spans.append((found, found + len(form)))
                start = found + len(form)
        for begin, end in spans:
            os.pwrite(fd, b"*" * (end - begin), offset + begin)


class RankFiles:
    """Masks the secrets in the files under a run's ``ranks/`` folder that torchrun writes, as they grow."""

    def __init__(self, folder: Path, forms: list[bytes]) -> None:
        self.folder = folder
        self.forms = forms
        self.done: dict[Path, int] = {}
        """How far each file is masked."""
        self.marks: dict[Path, list[tuple[int, float]]] = {}
        """Where each file's complete lines ended when it was looked at, and when that was."""

    def sweep(self, *, final: bool = False) -> None:
        """Mask the lines that have settled (every byte, when ``final``: the writers are gone)."""
        now = time.monotonic()
        for path in self.folder.rglob("*.log"):
            if path.is_symlink() or not path.is_file():
                continue
            try:
                fd = os.open(path, os.O_RDWR)
            except OSError:
                continue
            try:
                self._sweep(path, fd, now, final)
            finally:
                os.close(fd)

    def _sweep(self, path: Path, fd: int, now: float, final: bool) -> None:
        done = self.done.get(path, 0)
        marks = self.marks.setdefault(path, [])
        data = os.pread(fd, CHUNK_BYTES, done)
        end = data.rfind(b"\n") + 1
        if end == 0 and len(data) == CHUNK_BYTES:  # one very long line: all but where a form could be cut
            end = len(data) - max(map(len, self.forms), default=1) + 1
        boundary = done + (len(data) if final else end)
        if boundary > (marks[-1][0] if marks else done):
            marks.append((boundary, now))
        settled = boundary if final else max((b for b, t in marks if now - t >= SETTLE_SECONDS), default=done)
        if settled > done:
            mask(fd, done, data[: settled - done], self.forms)
            self.done[path] = settled
            self.marks[path] = [(b, t) for b, t in marks if b > settled]
