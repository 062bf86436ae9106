"""A training's checkpoint folder where a backend keeps it, read and written as files: what a run that moves to
another backend carries (:mod:`cloudddp.backends.checkpoints.carry`).

Each backend names its folder in the plan (``plan.target.checkpoints``: a path on this machine, an
``s3://`` URI, an ``azureml://datastores/...`` URI, a path on the Slurm cluster) and opens it as a
:class:`CheckpointStore` (:meth:`~cloudddp.backends.base.Backend.checkpoint_store`). A store streams: no file is
held in memory whole, whatever its size.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import IO, Protocol

CHUNK = 1 << 20
"""Bytes read or written at a time when a store streams."""


@dataclass(frozen=True)
class StoredFile:
    """A file in a checkpoint folder, as a store lists it."""

    path: str
    """Relative to the checkpoint folder, with ``/`` between its parts."""
    size: int


class CheckpointStore(Protocol):
    """One checkpoint folder at one backend's storage."""

    @property
    def location(self) -> str:
        """The folder as its backend names it (for messages)."""
        ...

    def files(self) -> list[StoredFile]:
        """Every file under the folder, at any depth (none when the folder does not exist)."""
        ...

    def reader(self, path: str) -> AbstractContextManager[IO[bytes]]:
        """The file ``path`` (relative), opened for reading as a stream."""
        ...

    def takes(self, path: str) -> bool:
        """Whether the store can hold a file named ``path`` (a folder: no part over 255 bytes; an object store: a
        UTF-8 key within its length): a carry reports a name it cannot, and carries the rest."""
        ...

    def write(self, path: str, stream: IO[bytes]) -> str | None:
        """Write ``path`` (relative, folders made as needed) from ``stream``, read in chunks of :data:`CHUNK`; the
        file appears under its name only once it is whole (a temporary name then a rename, or one request). An
        object store sizes its parts from the stream's :func:`length` where it tells one. The hex SHA-256 of what
        was sent where the service checked on write that it holds exactly that (each part's checksum, then the
        whole object's); None where it did not, and :meth:`sha256` must read it back."""
        ...

    def sha256(self, path: str) -> str:
        """The hex SHA-256 of what the store holds at ``path`` now (read back, or the store's own checksum)."""
        ...

    def remove(self, path: str) -> None:
        """Remove the file ``path`` (nothing when it is not there): a copy that failed its verification."""
        ...


def length(stream: IO[bytes]) -> int | None:
    """The bytes ``stream`` will give, where it says so (a carry's stream: the size its source listed), so that an
    object store can choose parts that carry the whole file within its service's part count; None when unknown."""
    told = getattr(stream, "length", None)
    return told if isinstance(told, int) else None


def chunks(stream: IO[bytes]) -> Iterator[bytes]:
    """``stream`` in pieces of at most :data:`CHUNK` bytes."""
    while block := stream.read(CHUNK):
        yield block


NAME_BYTES = 255
"""The longest file or folder name a POSIX filesystem takes."""


def posix_name(path: str) -> bool:
    """``path`` (read with ``surrogateescape``) fits a POSIX filesystem: no part over :data:`NAME_BYTES` bytes."""
    return all(len(part.encode(errors="surrogateescape")) <= NAME_BYTES for part in path.split("/"))


def object_key(key: str, limit: int) -> bool:
    """``key`` fits an object store: UTF-8 (a name that was not is read with ``surrogateescape``), at most
    ``limit`` bytes."""
    try:
        return len(key.encode()) <= limit
    except UnicodeEncodeError:
        return False


def unsafe(path: str) -> bool:
    """A relative path a store must not read or write: absolute, empty, or with a ``.``/``..`` part (an S3 key
    may be named ``../x``), so a listing from one store cannot make another write outside its folder."""
    parts = path.split("/")
    return not path or path.startswith("/") or any(part in ("", ".", "..") for part in parts)
