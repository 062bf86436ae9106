"""A training's checkpoint folder on Azure ML, read and written where the job's nodes see it: blobs of the
workspace's storage.

The job mounts its ``checkpoints`` output (``azureml://datastores/<datastore>/paths/<folder>/``) read-write, and
what its processes write there becomes blobs named ``<folder>/<file>`` in the datastore's container; a run that
moves to or from Azure ML reads and writes those blobs (azure-storage-blob, the backend's transport). Each file is
one block blob: written in blocks of :data:`~cloudddp.backends.checkpoints.store.CHUNK` and committed whole with
its last request, so it appears under its name only complete; read back in ranges of the same size. Blob storage
keeps an MD5 at most (and none for a blob written in blocks), so the SHA-256 is the blob's bytes read back through
hashlib.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import IO, Any

from cloudddp.backends.azureml.datastores import blob_container
from cloudddp.backends.checkpoints.store import CHUNK, StoredFile, chunks
from cloudddp.errors import UserError

_FOLDER = re.compile(r"^azureml://datastores/(?P<store>[^/]+)/paths/(?P<prefix>.*)$")
_SIZES = {key: CHUNK for key in ("max_single_put_size", "max_block_size", "max_single_get_size", "max_chunk_get_size")}
"""One request carries at most one chunk either way: azure-storage-blob's defaults send a file of up to 64 MiB in
one request, read into memory whole, and read up to 32 MiB in one."""
_FOLDER_MARKER = "hdi_isfolder"
"""The metadata of the empty blob that stands for a folder (blobfuse, a data lake): not a file."""


class BlobCheckpoints:
    """The blobs under one folder of one container: a :class:`~cloudddp.backends.checkpoints.store.CheckpointStore`."""

    def __init__(self, location: str, container: Any, prefix: str) -> None:
        self._location, self.container = location, container
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""

    @property
    def location(self) -> str:
        return self._location

    def files(self) -> list[StoredFile]:
        listed = self.container.list_blobs(name_starts_with=self.prefix, include=["metadata"])
        return [
            StoredFile(blob.name[len(self.prefix) :], blob.size)
            for blob in listed
            if (blob.metadata or {}).get(_FOLDER_MARKER) != "true"
        ]

    @contextmanager
    def reader(self, path: str) -> Iterator[IO[bytes]]:
        download = self.container.download_blob(self.prefix + path, max_concurrency=1)
        with io.BufferedReader(_Pieces(download.chunks()), CHUNK) as stream:
            yield stream

    def write(self, path: str, stream: IO[bytes]) -> None:
        # Over max_single_put_size (or of no known size), sent in blocks of max_block_size, then committed.
        self.container.upload_blob(self.prefix + path, stream, overwrite=True, max_concurrency=1)

    def remove(self, path: str) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        with suppress(ResourceNotFoundError):
            self.container.delete_blob(self.prefix + path)

    def sha256(self, path: str) -> str:
        digest = hashlib.sha256()
        with self.reader(path) as stream:
            for block in chunks(stream):
                digest.update(block)
        return digest.hexdigest()


class _Pieces(io.RawIOBase):
    """An iterator of byte strings (a download's chunks) read as a stream, one piece held at a time."""

    def __init__(self, pieces: Iterator[bytes]) -> None:
        self.pieces, self.left = pieces, b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self.left:
            self.left = next(self.pieces, b"")
            if not self.left:
                return 0
        size = min(len(buffer), len(self.left))
        buffer[:size], self.left = self.left[:size], self.left[size:]
        return size


def blob_checkpoints(ml_client: Any, location: str, credential: Any, transport: Any) -> BlobCheckpoints:
    """The checkpoint folder ``location`` (an ``azureml://datastores/<name>/paths/<folder>/`` URI) in the
    workspace of ``ml_client``."""
    match = _FOLDER.match(location)
    if not match:
        raise UserError(
            f"checkpoint.path: cloudddp carries Azure ML checkpoints only from a datastore folder, not {location}",
            hint="set checkpoint.path to azureml://datastores/<datastore>/paths/<folder>/ (or leave it out)",
        )
    fix = "cloudddp carries checkpoints only from a blob datastore: name one in checkpoint.path"
    container = blob_container(
        ml_client, match["store"], credential, transport, holds="the checkpoints are", fix=fix, **_SIZES
    )
    return BlobCheckpoints(location, container, match["prefix"])
