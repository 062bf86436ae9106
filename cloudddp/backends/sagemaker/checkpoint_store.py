"""A SageMaker training's checkpoint folder in S3 (``CheckpointConfig.S3Uri``) as a
:class:`~cloudddp.backends.checkpoints.store.CheckpointStore`: what a run moving to or from SageMaker carries
(:mod:`cloudddp.backends.checkpoints.carry`).

Every call goes through the backend's own client (its session, endpoint and credentials), with the bucket owner
check of the default bucket and the spec's KMS key on writes, as the code uploads have them (:mod:`.storage`).
A write streams: ``upload_fileobj`` reads the stream a part at a time (:func:`part_size`, :data:`IN_FLIGHT` parts
read ahead), never the whole file; parts grow with the file, so that any file S3 can hold fits its part count. A
file is sent with a SHA-256 checksum of each part, which S3 checks, and a write compares S3's checksum of the
object with the one computed over what was sent (of the whole, or of the parts' checksums: S3's composite), so a
carry reads nothing back. :meth:`S3Checkpoints.sha256` answers from S3's SHA-256 of an object of one part; one of
several parts has only S3's checksum of its parts' checksums, so it is read back, streaming, and hashed here.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
from collections.abc import Callable, Iterator
from typing import IO, Any

from cloudddp.backends.checkpoints.store import CHUNK, StoredFile, length, object_key, unsafe
from cloudddp.backends.sagemaker import storage
from cloudddp.errors import CloudDDPError

KEY_BYTES = 1024
"""The longest S3 object key, in UTF-8 bytes (cloudddp/data/SOURCES.md)."""
PART = 16 << 20
"""Bytes per part of a multipart upload of a file up to :data:`PARTS` of them (156 GiB, or of untold size), and the
largest upload sent in one request."""
PARTS = 10_000
"""The most parts of one multipart upload (cloudddp/data/SOURCES.md)."""
PART_MOST = 5 << 30
"""The largest part S3 takes: with :data:`PARTS`, the largest file a write carries is 48.8 TiB."""
IN_FLIGHT = 3
"""Parts read ahead and uploaded at once: what a write holds in memory is about this many parts (48 MiB up to a
156 GiB file, 60 MiB for a 200 GiB one, 15 GiB at S3's largest object)."""


def part_size(size: int | None) -> int:
    """The part size that carries a file of ``size`` bytes in at most :data:`PARTS` parts: :data:`PART`, or the
    least whole MiB over it that does; :data:`PART` when the size is not known. Over S3's limit, an error before
    anything is sent."""
    if size is None:
        return PART
    least = -(-size // PARTS)
    part = max(PART, -(-least // (1 << 20)) << 20)
    if part > PART_MOST:
        raise CloudDDPError(
            f"a file of {size} bytes is over what S3 holds in one object ({PARTS} parts of at most {PART_MOST} bytes)"
        )
    return part


class S3Checkpoints:
    """The checkpoint folder ``s3://bucket/prefix`` of a SageMaker training."""

    def __init__(
        self,
        s3: Any,
        uri: str,
        *,
        region: str,
        owner: str | None,
        kms_key: str | None,
        translate: Callable[[Exception], CloudDDPError | None],
    ) -> None:
        self.s3 = s3
        self.uri = uri.rstrip("/")
        self.bucket, _, key = self.uri.removeprefix("s3://").partition("/")
        self.prefix = f"{key}/" if key else ""
        self.region = region
        self.upload = {"expected_owner": owner, "kms_key": kms_key}
        """As the plan's uploads say it (:func:`.storage.write_args`)."""
        self.translate = translate
        self._bucket_checked = False

    @property
    def location(self) -> str:
        return self.uri

    def files(self) -> list[StoredFile]:
        from botocore.exceptions import ClientError

        found = []
        pages = self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix, **storage.owner_args(self.upload)
        )
        with self._errors():
            try:
                for page in pages:
                    for item in page.get("Contents", []):
                        if not item["Key"].endswith("/"):  # a folder's marker object, not a file
                            found.append(StoredFile(item["Key"][len(self.prefix) :], int(item["Size"])))
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") != "NoSuchBucket":
                    raise
        return sorted(found, key=lambda f: f.path)

    @contextlib.contextmanager
    def reader(self, path: str) -> Iterator[IO[bytes]]:
        with self._errors():
            body = self.s3.get_object(Bucket=self.bucket, Key=self._key(path), **storage.owner_args(self.upload))
            try:
                yield body["Body"]
            finally:
                body["Body"].close()

    def takes(self, path: str) -> bool:
        return object_key(self.prefix + path, KEY_BYTES)

    def write(self, path: str, stream: IO[bytes]) -> str | None:
        """Uploaded with a SHA-256 of each part, which S3 checks as each arrives; then S3's checksum of the object
        (of the whole, or of its parts' checksums) is compared with the same computed here over what was sent:
        equal, S3 holds what was sent, and its SHA-256 is returned (:func:`sent_checksum`)."""
        from boto3.s3.transfer import TransferConfig

        part = part_size(length(stream))
        config = TransferConfig(multipart_threshold=part, multipart_chunksize=part, max_concurrency=IN_FLIGHT)
        config.max_in_memory_upload_chunks = IN_FLIGHT  # s3transfer's own setting (10 parts), not boto3's argument
        sent = _Parts(stream, part)
        with self._errors():
            if not self._bucket_checked:  # a run moving here may be the first to use the bucket
                storage.ensure_bucket(self.s3, self.bucket, self.region, self.upload)
                self._bucket_checked = True
            self.s3.upload_fileobj(
                sent,
                self.bucket,
                self._key(path),
                ExtraArgs={"ChecksumAlgorithm": "SHA256", **storage.write_args(self.upload)},
                Config=config,
            )
            head = self._head(path)
        return sent.whole.hexdigest() if sent_checksum(head, sent) else None

    def sha256(self, path: str) -> str:
        """S3's own SHA-256 of the object when it has one of the whole object; else read back and hashed."""
        with self._errors():
            head = self._head(path)
        whole = head.get("ChecksumSHA256")
        parts = "-" in str(head.get("ETag", "")) or "-" in str(whole or "")
        if whole and not parts and head.get("ChecksumType", "FULL_OBJECT") == "FULL_OBJECT":
            return base64.b64decode(whole).hex()
        # a multipart upload's checksum is of its parts' checksums (moto gives it without S3's "-N" suffix; the
        # multipart ETag tells it either way)
        digest = hashlib.sha256()
        with self.reader(path) as body:
            while block := body.read(CHUNK):
                digest.update(block)
        return digest.hexdigest()

    def remove(self, path: str) -> None:
        with self._errors():
            self.s3.delete_object(Bucket=self.bucket, Key=self._key(path), **storage.owner_args(self.upload))

    def _head(self, path: str) -> Any:
        return self.s3.head_object(
            Bucket=self.bucket, Key=self._key(path), ChecksumMode="ENABLED", **storage.owner_args(self.upload)
        )

    def _key(self, path: str) -> str:
        if unsafe(path):
            raise CloudDDPError(f"{path!r} is not a file name inside the checkpoint folder {self.uri}")
        return self.prefix + path

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """botocore's errors as the backend says them, with the folder they were about."""
        try:
            yield
        except CloudDDPError:
            raise
        except Exception as e:
            mapped = self.translate(e)
            if mapped is None:
                raise
            raise type(mapped)(f"{self.uri}: {mapped}") from None


class _Parts(io.RawIOBase):
    """A stream read through in parts of ``part`` bytes, as ``upload_fileobj`` reads a stream it cannot seek: the
    SHA-256 of the whole and of each part, for S3's checksum of the object sent in one request or in parts."""

    def __init__(self, raw: IO[bytes], part: int) -> None:
        super().__init__()
        self.raw, self.part = raw, part
        self.whole = hashlib.sha256()
        self.parts: list[bytes] = []
        self._current, self._in_part = hashlib.sha256(), 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1, /) -> bytes:
        block = self.raw.read(size)
        self.whole.update(block)
        view = memoryview(block)
        while view:
            take = min(len(view), self.part - self._in_part)
            self._current.update(view[:take])
            self._in_part += take
            view = view[take:]
            if self._in_part == self.part:
                self._close_part()
        return block

    def _close_part(self) -> None:
        self.parts.append(self._current.digest())
        self._current, self._in_part = hashlib.sha256(), 0

    def digests(self) -> list[bytes]:
        """Each part's SHA-256, the last (shorter) one included."""
        return self.parts + ([self._current.digest()] if self._in_part else [])


def sent_checksum(head: dict[str, Any], sent: _Parts) -> bool:
    """Whether S3's ``ChecksumSHA256`` of the object (HeadObject) is the one of what was ``sent``: the SHA-256 of
    the whole for an object of one request; for one of parts, the SHA-256 of the parts' SHA-256s, joined
    (``-<parts>`` after it: S3 says it, moto leaves it out), as S3 computes its composite checksum."""
    value = str(head.get("ChecksumSHA256") or "")
    if not value:
        return False
    checksum, _, count = value.partition("-")
    multipart = "-" in str(head.get("ETag", "")) or bool(count) or head.get("ChecksumType") == "COMPOSITE"
    if not multipart:
        return checksum == base64.b64encode(sent.whole.digest()).decode()
    digests = sent.digests()
    composite = base64.b64encode(hashlib.sha256(b"".join(digests)).digest()).decode()
    return checksum == composite and (not count or int(count) == len(digests))
