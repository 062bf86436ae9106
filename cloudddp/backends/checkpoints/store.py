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

    def write(self, path: str, stream: IO[bytes]) -> None:
        """Write ``path`` (relative, folders made as needed) from ``stream``, read in chunks of :data:`CHUNK`; the
        file appears under its name only once it is whole (a temporary name then a rename, or one request)."""
        ...

    def sha256(self, path: str) -> str:
        """The hex SHA-256 of what the store holds at ``path`` now (read back, or the store's own checksum)."""
        ...

    def remove(self, path: str) -> None:
        """Remove the file ``path`` (nothing when it is not there): a copy that failed its verification."""
        ...


def chunks(stream: IO[bytes]) -> Iterator[bytes]:
    """``stream`` in pieces of at most :data:`CHUNK` bytes."""
    while block := stream.read(CHUNK):
        yield block


def unsafe(path: str) -> bool:
    """A relative path a store must not read or write: absolute, empty, or with a ``.``/``..`` part (an S3 key
    may be named ``../x``), so a listing from one store cannot make another write outside its folder."""
    parts = path.split("/")
    return not path or path.startswith("/") or any(part in ("", ".", "..") for part in parts)
