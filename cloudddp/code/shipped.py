"""What a code snapshot ships, and what a plan says about it.

:class:`Snapshot` is the packed folder as the rest of cloudddp sees it (made by :func:`cloudddp.code.snapshot.pack`):
its files, its size, its largest files, and what was left out. :func:`snapshot_warnings` words what a person
should know before it is uploaded: files left out because they look like credentials or because they are the
job's inputs, and, for a large snapshot, its largest files with the line that leaves each out.
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO, NamedTuple

from cloudddp.code.ignore import ignore_line
from cloudddp.code.scan import Entry
from cloudddp.observe.units import human_bytes

WARN_BYTES = 50_000_000
"""Snapshots larger than this (compressed) come with a warning naming their largest files."""
LARGEST_SHOWN = 5
_SIZE = operator.attrgetter("stamp.size")  # called in C, once per file


class Snapshot(NamedTuple):
    """A packed code folder: its .tar.gz on disk, named by its sha256. A named tuple, as the code package's other
    records are: cheaper to define than a frozen dataclass (~1 ms of every render)."""

    root: Path
    files: tuple[str, ...]  # posix paths relative to root, sorted
    sha256: str
    size: int  # bytes of the .tar.gz
    path: Path  # the .tar.gz, in the snapshot cache
    file_bytes: int = 0  # bytes of the files before compression
    largest: tuple[tuple[str, int], ...] = ()  # the biggest files and their sizes, biggest first
    left_out: tuple[str, ...] = ()  # files left out only because they look like credentials
    inputs_left_out: tuple[tuple[str, str], ...] = ()  # (path, input name): the job's inputs inside the folder
    secrets_left_out: tuple[str, ...] = ()  # spec files that hold literal secret values

    def open(self) -> BinaryIO:
        """The archive for reading (to upload it as a stream)."""
        return open(self.path, "rb")


def largest_files(entries: Sequence[Entry], total: int) -> tuple[tuple[str, int], ...]:
    """The biggest files, those worth leaving out (1% of the total or more; always the biggest one)."""
    biggest = heapq.nlargest(LARGEST_SHOWN, entries, key=_SIZE)  # sorted()[:n] in O(n); ties stay in name order
    return tuple((e.rel, e.stamp.size) for i, e in enumerate(biggest) if i == 0 or e.stamp.size * 100 >= total)


def advice(root: Path, largest: Sequence[tuple[str, int]]) -> str:
    """The largest files as a table, each with the line that leaves it out."""
    width = max(len(rel) for rel, _ in largest)
    rows = "\n".join(f"    {human_bytes(size):>10}  {rel:<{width}}  {ignore_line(rel)}" for rel, size in largest)
    return (
        f"Its largest files, each with the line that leaves it out (add the line to {root / '.cloudddpignore'}, "
        f"or to code.ignore in the spec):\n{rows}"
    )


def snapshot_warnings(snapshot: Snapshot, threshold: int = WARN_BYTES) -> list[str]:
    """What a plan should say about a snapshot: the files left out because they look like credentials, and,
    above ``threshold`` bytes, how big it is, its largest files and how to leave each out."""
    notes = [
        f"left out of the code snapshot: {rel}, which is inputs.{name}: the job gets it once, as an input, not a "
        f"second time with the code (the script finds it through the input's `arg` or CLOUDDDP_INPUT_{name.upper()})"
        for rel, name in snapshot.inputs_left_out
    ]
    notes += [
        f"left out of the code snapshot: {rel}, which holds the literal value of a `secret: true` variable "
        "(secret values never leave this machine); give the secret with `from_env:` instead, or keep the spec "
        "outside code.dir, if the job needs the file"
        for rel in snapshot.secrets_left_out
    ]
    if snapshot.left_out:
        shown = ", ".join(snapshot.left_out[:10]) + (" ..." if len(snapshot.left_out) > 10 else "")
        notes.append(
            f"left out of the code snapshot because they look like credentials: {shown} "
            f"(to ship one anyway, add a line !{ignore_line(snapshot.left_out[0])} to .cloudddpignore)"
        )
    if snapshot.size <= threshold or not snapshot.largest:
        return notes
    return notes + [
        f"the code snapshot of {snapshot.root} is {human_bytes(snapshot.size)} compressed "
        f"({human_bytes(snapshot.file_bytes)} in {len(snapshot.files):,} files, warned above "
        f"{human_bytes(threshold)}); all of it is uploaded again whenever the code changes. "
        + advice(snapshot.root, snapshot.largest)
    ]
