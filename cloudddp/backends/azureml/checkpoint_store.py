"""A training's checkpoint folder on Azure ML, read and written where the job's nodes see it: blobs of the
workspace's storage.

The job mounts its ``checkpoints`` output (``azureml://datastores/<datastore>/paths/<folder>/``) read-write, and
what its processes write there becomes blobs named ``<folder>/<file>`` in the datastore's container; a run that
moves to or from Azure ML reads and writes those blobs (azure-storage-blob, the backend's transport). Each file is
one block blob: staged a block at a time (:func:`block_size`: larger blocks for a larger file, so that any file a
block blob holds fits its block count), each with its MD5, which the service checks, and committed whole with its
last request (Put Block List), so it appears under its name only complete; read back in ranges of
:data:`~cloudddp.backends.checkpoints.store.CHUNK`. A write returns the SHA-256 of what it sent, which the blocks'
MD5s checked on arrival; otherwise (a file already there) the SHA-256 is the blob's bytes read back through
hashlib: Blob storage keeps an MD5 at most, and none for a blob written in blocks.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import IO, Any

from cloudddp.backends.azureml.datastores import blob_container
from cloudddp.backends.checkpoints.store import CHUNK, StoredFile, chunks, length, object_key
from cloudddp.errors import CloudDDPError, UserError

_FOLDER = re.compile(r"^azureml://datastores/(?P<store>[^/]+)/paths/(?P<prefix>.*)$")
_SIZES = {key: CHUNK for key in ("max_single_get_size", "max_chunk_get_size")}
"""A read takes one chunk a request: azure-storage-blob's defaults read up to 32 MiB in one."""
BLOCKS = 50_000
"""The most blocks of a block blob (cloudddp/data/SOURCES.md)."""
BLOCK_MOST = 4000 << 20
"""The largest block Put Block takes: with :data:`BLOCKS`, the largest file a write carries is about 190.7 TiB."""
BLOB_NAME = 1024
"""The longest blob name: 1,024 characters, counted here in UTF-8 bytes, never fewer (cloudddp/data/SOURCES.md)."""
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

    def takes(self, path: str) -> bool:
        return object_key(self.prefix + path, BLOB_NAME)

    def write(self, path: str, stream: IO[bytes]) -> str:
        """Staged in blocks of :func:`block_size` (one held at a time), each checked by the service against its
        MD5, then committed: the blob replaced whole, holding what was sent, whose SHA-256 is returned."""
        from azure.storage.blob import BlobBlock

        size = block_size(length(stream))
        blob = self.container.get_blob_client(self.prefix + path)
        staged: list[BlobBlock] = []
        sent = hashlib.sha256()
        while data := _block(stream, size):
            block_id = base64.b64encode(f"{len(staged):08d}".encode()).decode()  # every id of a blob one length
            blob.stage_block(block_id, data, length=len(data), validate_content="md5")
            staged.append(BlobBlock(block_id))
            sent.update(data)
        blob.commit_block_list(staged)
        return sent.hexdigest()

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


def block_size(size: int | None) -> int:
    """The block size that carries a file of ``size`` bytes in at most :data:`BLOCKS` blocks:
    :data:`~cloudddp.backends.checkpoints.store.CHUNK`, or the least whole MiB over it that does (4.1 MiB for a
    200 GiB file); a chunk when the size is not known. Over a block blob's limit, an error before anything is
    sent."""
    if size is None:
        return CHUNK
    least = -(-size // BLOCKS)
    block = max(CHUNK, -(-least // (1 << 20)) << 20)
    if block > BLOCK_MOST:
        raise CloudDDPError(
            f"a file of {size} bytes is over what a block blob holds ({BLOCKS} blocks of at most {BLOCK_MOST} bytes)"
        )
    return block


def _block(stream: IO[bytes], size: int) -> bytes:
    """The next ``size`` bytes of ``stream`` (fewer only at its end), however few each read gives."""
    pieces, got = [], 0
    while got < size and (piece := stream.read(min(CHUNK, size - got))):
        pieces.append(piece)
        got += len(piece)
    return b"".join(pieces)


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
