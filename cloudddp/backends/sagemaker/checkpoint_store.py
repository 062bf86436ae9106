"""A SageMaker training's checkpoint folder in S3 (``CheckpointConfig.S3Uri``) as a
:class:`~cloudddp.backends.checkpoints.store.CheckpointStore`: what a run moving to or from SageMaker carries
(:mod:`cloudddp.backends.checkpoints.carry`).

Every call goes through the backend's own client (its session, endpoint and credentials), with the bucket owner
check of the default bucket and the spec's KMS key on writes, as the code uploads have them (:mod:`.storage`).
A write streams: ``upload_fileobj`` reads the stream a part at a time (:data:`PART`, :data:`IN_FLIGHT` parts read
ahead), never the whole file. A file that fits one part is sent with a SHA-256 checksum that S3 checks and keeps,
and :meth:`S3Checkpoints.sha256` answers from it; a larger one has only S3's checksum of its parts' checksums, so
it is read back, streaming, and hashed here.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
from collections.abc import Callable, Iterator
from typing import IO, Any

from cloudddp.backends.checkpoints.store import CHUNK, StoredFile, unsafe
from cloudddp.backends.sagemaker import storage
from cloudddp.errors import CloudDDPError

PART = 16 << 20
"""Bytes per part of a multipart upload, and the largest upload sent in one request: S3 takes 5 MiB to 5 GiB a
part and at most 10,000 parts, so a file of up to 156 GiB."""
IN_FLIGHT = 3
"""Parts read ahead and uploaded at once: what a write holds in memory is about this many parts, whatever the
file's size."""


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

    def write(self, path: str, stream: IO[bytes]) -> None:
        from boto3.s3.transfer import TransferConfig

        config = TransferConfig(multipart_threshold=PART, multipart_chunksize=PART, max_concurrency=IN_FLIGHT)
        config.max_in_memory_upload_chunks = IN_FLIGHT  # s3transfer's own setting (10 parts), not boto3's argument
        with self._errors():
            if not self._bucket_checked:  # a run moving here may be the first to use the bucket
                storage.ensure_bucket(self.s3, self.bucket, self.region, self.upload)
                self._bucket_checked = True
            self.s3.upload_fileobj(
                stream,
                self.bucket,
                self._key(path),
                ExtraArgs={"ChecksumAlgorithm": "SHA256", **storage.write_args(self.upload)},
                Config=config,
            )

    def sha256(self, path: str) -> str:
        """S3's own SHA-256 of the object when it has one of the whole object; else read back and hashed."""
        with self._errors():
            head = self.s3.head_object(
                Bucket=self.bucket, Key=self._key(path), ChecksumMode="ENABLED", **storage.owner_args(self.upload)
            )
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
