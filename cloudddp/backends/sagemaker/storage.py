"""The SageMaker backend's S3 side: the bucket and the content-addressed snapshots, as an expert writes them.

- The bucket is created with ``CreateBucketConfiguration`` outside us-east-1 (S3 refuses a bucket without
  a location constraint at any other regional endpoint: IllegalLocationConstraintException).
- Every call to the default bucket (``sagemaker-<region>-<account>``, a name anyone can take first) carries
  ``ExpectedBucketOwner`` (the caller's account, from STS): S3 answers 403 when someone else owns it, and
  cloudddp stops there instead of handing them the code.
- The code archive is reused only when the object at its content-addressed key holds that content: its
  ``ChecksumSHA256`` (cloudddp uploads it in one part with a SHA-256 checksum), else the ETag of a
  single-part upload (the MD5). Anything else at that key (planted, or cut short) is replaced.
- With ``sagemaker.output_kms_key`` the uploads are encrypted with that key (SSE-KMS), as the outputs are.

boto3 is imported only by the functions that call S3; the caller passes the client.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from pathlib import Path
from typing import Any

from cloudddp.backends.base import Progress
from cloudddp.code.scan import collect
from cloudddp.code.snapshot import folder_digest
from cloudddp.errors import UserError
from cloudddp.runtime import packed

NO_LOCATION_CONSTRAINT = "us-east-1"  # the one region where CreateBucket takes no CreateBucketConfiguration
SINGLE_PART_MAX = 5 * 1024**3  # S3's largest single PUT: the code archive goes in one part, whole checksum
_MISSING = ("404", "NoSuchKey", "NotFound", "NoSuchBucket")


def _code(error: Exception) -> str:
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def owner_args(up: dict[str, Any]) -> dict[str, str]:
    """``ExpectedBucketOwner`` for an upload to the default bucket (the plan names the account)."""
    return {"ExpectedBucketOwner": up["expected_owner"]} if up.get("expected_owner") else {}


def write_args(up: dict[str, Any]) -> dict[str, str]:
    """What every write of ``up`` carries: the owner check, and SSE-KMS with the spec's output key."""
    kms = {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": up["kms_key"]} if up.get("kms_key") else {}
    return {**owner_args(up), **kms}


def ensure_bucket(s3: Any, bucket: str, region: str, up: dict[str, Any]) -> None:
    """Create ``bucket`` in ``region`` unless it exists; a default bucket someone else owns is an error."""
    from botocore.exceptions import ClientError

    try:
        s3.head_bucket(Bucket=bucket, **owner_args(up))
        return
    except ClientError as e:
        code = _code(e)
        if code in ("403", "AccessDenied") and up.get("expected_owner"):
            raise UserError(
                f"s3://{bucket} exists and is not owned by account {up['expected_owner']} (S3 refused "
                "ExpectedBucketOwner): cloudddp does not upload code to someone else's bucket",
                hint="set sagemaker.bucket to a bucket of your account",
            ) from None
        if code not in _MISSING:
            raise
    config = {} if region == NO_LOCATION_CONSTRAINT else {"CreateBucketConfiguration": {"LocationConstraint": region}}
    s3.create_bucket(Bucket=bucket, **config)


def sha256_checksum(hex_digest: str) -> str:
    """S3's ``ChecksumSHA256`` (base64 of the digest) for a hex SHA-256."""
    return base64.b64encode(bytes.fromhex(hex_digest)).decode("ascii")


def holds(head: dict[str, Any], sha256: str, path: Path) -> bool:
    """Whether the object described by ``head`` (HeadObject with ChecksumMode) has exactly the file's content."""
    if head.get("ChecksumSHA256"):
        return bool(head["ChecksumSHA256"] == sha256_checksum(sha256))
    etag = str(head.get("ETag", "")).strip('"')
    if not etag or "-" in etag:  # a multipart ETag is no digest of the content
        return False
    md5 = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            md5.update(block)
    return etag == md5.hexdigest()


def upload(s3: Any, up: dict[str, Any], region: str, progress: Progress | None) -> int:
    """Upload one snapshot of a plan unless it is already there; the bytes sent."""
    bucket, _, key = up["destination"].removeprefix("s3://").partition("/")
    ensure_bucket(s3, bucket, region, up)
    if up["kind"] == "code":
        return _put_code(s3, bucket, key, packed(up), up, progress)
    folder = Path(up["source"])
    files = collect(folder)
    if folder_digest(folder, files) != up["sha256"]:
        raise UserError(f"inputs.{up['name']} ({folder}) changed between render and launch; render again")
    return _put_folder(s3, bucket, key, [(rel, folder / rel) for rel in files], up, progress)


def _head(s3: Any, bucket: str, key: str, up: dict[str, Any]) -> dict[str, Any] | None:
    from botocore.exceptions import ClientError

    try:
        found: dict[str, Any] = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED", **owner_args(up))
        return found
    except ClientError as e:
        if _code(e) not in _MISSING:
            raise
        return None


def _reporter(up: dict[str, Any], where: str, total: int, progress: Progress | None) -> Any:
    done, lock = 0, threading.Lock()

    def advance(sent: int) -> None:  # called from boto3's transfer threads
        nonlocal done
        with lock:
            done += sent
            if progress:
                progress.advance(f"uploading {up['kind']} to {where}", done, total)

    return advance


def _put_code(s3: Any, bucket: str, key: str, path: Path, up: dict[str, Any], progress: Progress | None) -> int:
    from boto3.s3.transfer import TransferConfig

    head = _head(s3, bucket, key, up)
    if head is not None:
        if holds(head, up["sha256"], path):
            if progress:
                progress.step(f"code snapshot {up['sha256'][:12]} already in s3://{bucket}: nothing to upload")
            return 0
        if progress:
            progress.step(
                f"s3://{bucket}/{key} does not hold code snapshot {up['sha256'][:12]} (its checksum differs): "
                "replacing it"
            )
    size = path.stat().st_size
    if size > SINGLE_PART_MAX:
        raise UserError(f"the code snapshot is {size} bytes; S3 takes at most {SINGLE_PART_MAX} in one part")
    s3.upload_file(
        str(path),
        bucket,
        key,
        ExtraArgs={"ChecksumAlgorithm": "SHA256", **write_args(up)},
        Config=TransferConfig(multipart_threshold=SINGLE_PART_MAX),
        Callback=_reporter(up, f"s3://{bucket}/{key}", size, progress),
    )
    return size


def _put_folder(
    s3: Any, bucket: str, key: str, files: list[tuple[str, Path]], up: dict[str, Any], progress: Progress | None
) -> int:
    """A folder's files under ``key``, then a marker holding its digest; skipped when the marker is there
    and holds that digest."""
    from botocore.exceptions import ClientError

    marker = key.rstrip("/") + "/.cloudddp-complete"
    try:
        body = s3.get_object(Bucket=bucket, Key=marker, **owner_args(up))["Body"].read()
        if body.decode(errors="replace") == up["sha256"]:
            if progress:
                progress.step(f"{up['kind']} snapshot {up['sha256'][:12]} already in s3://{bucket}: nothing to upload")
            return 0
    except ClientError as e:
        if _code(e) not in _MISSING:
            raise
    total = sum(path.stat().st_size for _, path in files)
    advance = _reporter(up, f"s3://{bucket}/{key}", total, progress)
    for rel, path in files:
        s3.upload_file(str(path), bucket, key.rstrip("/") + "/" + rel, ExtraArgs=write_args(up), Callback=advance)
    s3.put_object(Bucket=bucket, Key=marker, Body=up["sha256"].encode(), **write_args(up))
    return total
