"""What a run moving to another backend takes with it: its checkpoint folder, copied from the old backend's store to
the new one's (:mod:`cloudddp.backends.checkpoints.store`), verified, streamed.

What is carried: the shared script's newest *complete* checkpoint (``ckpt-e<epoch>-s<step>.pt`` with its
``.sha256`` beside it, as :mod:`ddptrain.checkpoint` writes them), every kept file (``files/...``), framework
checkpoints and anything else in the folder. What is not: the shared script's older checkpoints and a checkpoint
without its ``.sha256`` (torn), and hidden names (cloudddp's lock, temporary copies of a write in progress), with
everything inside a hidden folder.

How it is verified: each file streams through a SHA-256 while it is written, then the target's own hash of what
it holds must equal it (what the service checked on write, where it did: S3's part and object checksums, Azure's
per-block MD5; else the store's checksum or the file read back), and the shared checkpoint's must equal its
``.sha256``. A mismatch raises, naming the file and both stores. The shared checkpoint's ``.sha256`` is written
last, after everything else has been verified: a carry that fails leaves no new complete checkpoint at the target
(the script, and :mod:`cloudddp.backends.checkpoints.contents`, count a checkpoint only with its ``.sha256``).

A second carry is cheap: a file the target already holds with the same size and hash is not copied again.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any, cast

from cloudddp.backends.base import Backend, Progress, mapped_errors
from cloudddp.backends.checkpoints.store import CheckpointStore, StoredFile, unsafe
from cloudddp.errors import CloudDDPError
from cloudddp.observe.console import safe_name
from cloudddp.plan import Target

_SHARED = re.compile(r"^ckpt-e(\d{4,})-s(\d{7,})\.pt$")
"""The shared script's checkpoint, at the top of the folder (:mod:`ddptrain.checkpoint`)."""
DIGEST = ".sha256"
"""Beside a shared checkpoint: its SHA-256, in hex; written after it, so its presence marks it complete."""
_DIGEST_MOST = 256
"""The most bytes of a ``.sha256`` file read (64 hex digits and a newline)."""


@dataclass(frozen=True)
class Selection:
    """What a carry copies from a folder's listing, and what it leaves out."""

    shared: str | None
    """The shared script's newest checkpoint that has its ``.sha256``; None when there is none."""
    files: tuple[StoredFile, ...]
    """To copy in this order: everything else, then the shared checkpoint, then its ``.sha256``."""
    left_out: tuple[str, ...]


@dataclass(frozen=True)
class Carried:
    """What one carry did, for the plan and the run's history."""

    source: str
    target: str
    copied: tuple[str, ...]
    skipped: tuple[str, ...]
    """Already at the target with the same hash."""
    left_out: tuple[str, ...]
    bytes: int
    """Bytes copied (skipped files not counted)."""
    checkpoint: str | None
    """The shared script's checkpoint carried (or found already there); None when the folder held none."""
    resumes_from: str | None
    """The newest complete shared checkpoint at the target after the carry: the one the script resumes from (a
    newer one already there wins over :attr:`checkpoint`)."""
    unnamed: tuple[str, ...] = ()
    """Files the target cannot name (too long a part, not UTF-8 for an object store, a file where another's folder
    is): each reported, the rest carried."""

    @property
    def position(self) -> tuple[int, int] | None:
        """The epoch and step :attr:`resumes_from` was saved at."""
        return _position(self.resumes_from or "")

    def summary(self) -> str:
        """One line: what was carried where, and what the run resumes from."""
        moved = f"{len(self.copied)} files ({_size(self.bytes)})"
        skipped = f", {len(self.skipped)} already there" if self.skipped else ""
        line = f"carried {moved}{skipped} from {self.source} to {self.target}"
        if self.unnamed:
            names = ", ".join(safe_name(name) for name in self.unnamed)
            line += f"; not carried, {len(self.unnamed)} the target cannot name: {names}"
        position = self.position
        if position is not None:
            line += f"; the shared script resumes from {self.resumes_from} (epoch {position[0]}, step {position[1]})"
            if self.checkpoint != self.resumes_from:
                line += f", newer than the carried {self.checkpoint}"
        return line


def _position(name: str) -> tuple[int, int] | None:
    found = _SHARED.match(name)
    return (int(found.group(1)), int(found.group(2))) if found else None


def newest_complete(names: Sequence[str]) -> str | None:
    """The shared script's newest checkpoint among ``names`` (a folder's top) that has its ``.sha256``."""
    present = set(names)
    complete = [(_position(n), n) for n in present if _position(n) is not None and n + DIGEST in present]
    return max(complete)[1] if complete else None


def select(files: Sequence[StoredFile]) -> Selection:
    """What to carry of a folder's ``files``."""
    shared = newest_complete([f.path for f in files])
    own = {shared, shared + DIGEST} if shared else set()
    carried: list[StoredFile] = []
    left_out: list[StoredFile] = []
    for file in files:
        hidden = any(part.startswith(".") for part in file.path.split("/"))
        older = file.path not in own and (
            _position(file.path) is not None or _position(file.path.removesuffix(DIGEST)) is not None
        )
        (left_out if unsafe(file.path) or hidden or older else carried).append(file)
    order = {shared: 1, (shared or "") + DIGEST: 2}
    carried.sort(key=lambda f: (order.get(f.path, 0), f.path))
    return Selection(shared, tuple(carried), tuple(f.path for f in left_out))


def carry(source: CheckpointStore, target: CheckpointStore, progress: Progress | None = None) -> Carried:
    """Copy what a resume needs from ``source`` to ``target`` (see the module's docstring)."""
    chosen = select(source.files())
    unnamed = _unnamed(chosen.files, target)
    chosen = Selection(chosen.shared, tuple(f for f in chosen.files if f.path not in unnamed), chosen.left_out)
    there = {f.path: f.size for f in target.files()}
    expected = _digest_of(source, chosen.shared) if chosen.shared else None
    tally = _Tally(f"carrying checkpoints to {target.location}", progress)
    tally.total = sum(f.size for f in chosen.files if there.get(f.path) != f.size)
    copied: list[str] = []
    skipped: list[str] = []
    for file in chosen.files:
        want = expected if file.path == chosen.shared else None
        if there.get(file.path) == file.size:
            if _same(source, target, file.path, want):
                skipped.append(file.path)
                continue
            tally.total += file.size  # the same size, another content: copied after all
        _copy(source, target, file, want, tally.advance)
        copied.append(file.path)
    return Carried(
        source=source.location,
        target=target.location,
        copied=tuple(copied),
        skipped=tuple(skipped),
        left_out=chosen.left_out,
        bytes=tally.sent,
        checkpoint=chosen.shared,
        resumes_from=newest_complete([f.path for f in target.files()]),
        unnamed=tuple(sorted(unnamed)),
    )


def _unnamed(files: Sequence[StoredFile], target: CheckpointStore) -> set[str]:
    """The files ``target`` cannot hold under their names: one it does not take, and one named as another's folder
    (``a`` beside ``a/b``: an object store lists both, a filesystem holds one)."""
    folders = {path.rsplit("/", 1)[0] for path in (f.path for f in files) if "/" in path}
    folders |= {folder.rsplit("/", i)[0] for folder in folders for i in range(1, folder.count("/") + 1)}
    return {f.path for f in files if f.path in folders or not target.takes(f.path)}


class _Tally:
    """Bytes copied so far, reported to the CLI's progress."""

    def __init__(self, description: str, progress: Progress | None) -> None:
        self.description = description
        self.progress = progress
        self.sent = 0
        self.total = 0

    def advance(self, n: int) -> None:
        self.sent += n
        if self.progress:
            self.progress.advance(self.description, self.sent, self.total)


def _digest_of(source: CheckpointStore, checkpoint: str) -> str:
    """The hex SHA-256 a shared checkpoint's ``.sha256`` file holds."""
    with source.reader(checkpoint + DIGEST) as f:
        return f.read(_DIGEST_MOST).decode(errors="replace").strip().lower()


def _same(source: CheckpointStore, target: CheckpointStore, path: str, want: str | None) -> bool:
    """The target already holds ``path`` as the source has it (the shared checkpoint: as its ``.sha256`` says)."""
    return target.sha256(path) == (want or source.sha256(path))


def _copy(
    source: CheckpointStore, target: CheckpointStore, file: StoredFile, want: str | None, seen: Callable[[int], None]
) -> None:
    """Stream ``file`` from ``source`` to ``target`` through a SHA-256, then check what the target holds."""
    with source.reader(file.path) as raw:
        hashing = _Hashing(raw, seen, file.size)
        written = target.write(file.path, cast(IO[bytes], hashing))
    try:
        _verify(source, target, file, hashing, want, written)
    except BaseException:
        target.remove(file.path)  # a file that failed its verification does not stay at the target
        raise


def _verify(
    source: CheckpointStore,
    target: CheckpointStore,
    file: StoredFile,
    hashing: _Hashing,
    want: str | None,
    written: str | None,
) -> None:
    """What was read is what was listed (and what its ``.sha256`` says), and what the target holds is what was read:
    ``written``, where the target's service checked it on write, else the target's own hash, read back."""
    read = hashing.hasher.hexdigest()
    name = safe_name(file.path)
    where = f"from {safe_name(source.location)} to {safe_name(target.location)}"
    if hashing.size != file.size:
        raise CloudDDPError(f"carrying {name} {where}: read {hashing.size} bytes of the {file.size} listed")
    if want is not None and read != want:
        raise CloudDDPError(
            f"carrying {name} {where}: the checkpoint does not match its {name}{DIGEST} at the source "
            f"(sha256 {read}, the file says {safe_name(want)}): it is corrupt there and was not carried as complete"
        )
    held = written or target.sha256(file.path)
    if held != read:
        raise CloudDDPError(
            f"carrying {name} {where}: the target holds sha256 {held} after the copy, the source sent {read}"
        )


class _Hashing(io.RawIOBase):
    """A stream read through: what passes is hashed, counted and reported, never kept. Its ``length`` is the
    size the source listed (:func:`~cloudddp.backends.checkpoints.store.length`)."""

    def __init__(self, raw: IO[bytes], seen: Callable[[int], None], length: int) -> None:
        super().__init__()
        self.raw = raw
        self.seen = seen
        self.length = length
        self.hasher = hashlib.sha256()
        self.size = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1, /) -> bytes:
        block = self.raw.read(size)
        self.hasher.update(block)
        self.size += len(block)
        if block:
            self.seen(len(block))
        return block


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    shown = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        shown /= 1024
        if shown < 1024 or unit == "GiB":
            break
    return f"{shown:.1f} {unit}"


def carried_to(
    source: Backend[Any],
    source_target: Target,
    dest: Backend[Any],
    dest_target: Target,
    progress: Progress | None = None,
) -> str:
    """Carry the latest checkpoint from ``source``'s folder (a run's target) to ``dest``'s (a plan's); what was
    carried, in words for the run's history ("" when either side keeps no checkpoints, or both name one folder)."""
    here, there = source_target.checkpoints, dest_target.checkpoints
    if here is None or there is None or (source.name == dest.name and here == there):
        return ""
    try:
        with mapped_errors(source), mapped_errors(dest):
            carried = carry(source.checkpoint_store(source_target), dest.checkpoint_store(dest_target), progress)
    except CloudDDPError:
        raise
    except Exception as e:  # a storage error neither backend maps: the move stops, said, never a dead watcher
        raise CloudDDPError(f"the checkpoints could not be carried from {here} to {there}: {e}") from e
    return carried.summary()
