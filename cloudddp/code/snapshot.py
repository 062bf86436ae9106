"""Code and data snapshots: deterministic archives keyed by their content hash.

The same folder always packs to the same bytes (sorted entries, fixed mtime, uid/gid 0, fixed modes,
gzip header without a name or timestamp), so its sha256 names it and an unchanged snapshot is never
uploaded twice. What goes in is :mod:`cloudddp.code.scan`'s list of the folder's files after the ignore rules
(:mod:`cloudddp.code.ignore`); what a plan says about the result, :mod:`cloudddp.code.shipped`.

The archive is written in one streaming pass (see :mod:`cloudddp.code.tarstream`) to
``$CLOUDDDP_HOME/snapshots/<sha256>.tar.gz``, so memory stays small whatever the folder
holds. A stat index (see :mod:`cloudddp.code.filestate`) then recognises the unchanged folder on the next
render without reading or packing it again; data folders get the same treatment file by file.
"""

from __future__ import annotations

import bisect
import hashlib
import operator
import os
import stat
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cloudddp.code.filestate import (
    DigestCache,
    file_sha256,
    key_of,
    racy_files,
    read_record,
    stamps_sha256,
    write_record,
)
from cloudddp.code.ignore import ignore_line, ignore_lines
from cloudddp.code.scan import Entry, scan
from cloudddp.code.shipped import Snapshot, advice, largest_files
from cloudddp.code.tarstream import Fields, Member, write_targz
from cloudddp.errors import UserError
from cloudddp.observe.units import human_bytes
from cloudddp.paths import home
from cloudddp.spec.size import MAX_BYTES as SPEC_BYTES

MAX_BYTES = 2_000_000_000
"""Folders holding more than this (before compression) are refused before anything is packed."""
CACHE_BYTES = int(os.environ.get("CLOUDDDP_SNAPSHOT_CACHE_BYTES") or 5_000_000_000)
"""Old snapshots are deleted, least recently used first, once the cache holds more than this."""
CACHE_GRACE_SECONDS = 600  # a snapshot used this recently is never deleted (another submit may be uploading it)
_FORMAT = 1  # bump when the archive layout changes, so stale index records stop matching
_NAME, _SIZE = operator.itemgetter(0), operator.attrgetter("stamp.size")  # read in C, once per file


def cache_dir() -> Path:
    return home() / "snapshots"


def safe_member(name: str) -> str:
    """A path for inside an archive: relative, normalised, never climbing out."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if name.startswith("/") or ".." in parts or not parts:
        raise UserError(f"refusing to package {name!r}: paths must stay inside the code folder")
    return "/".join(parts)


def pack(
    root: Path,
    ignore: Sequence[str] = (),
    extra: Mapping[str, bytes] | None = None,
    *,
    max_bytes: int = MAX_BYTES,
    inputs: Mapping[str, str] | None = None,
    secrets: Sequence[str] = (),
) -> Snapshot:
    """The folder as a deterministic .tar.gz in the snapshot cache, and its sha256; ``extra`` adds files
    cloudddp ships with the code (name in the archive -> bytes), which must not collide with the folder's own.
    ``inputs`` (a path relative to ``root`` -> the input's name) are the job's data inside the folder: they
    travel as inputs, so they are left out of the snapshot (and said so in :func:`snapshot_warnings`).
    ``secrets`` (the spec's literal secret values): a spec file in the folder that holds one is left out, so the
    values never leave this machine (:func:`holding_secrets`).

    An unchanged folder (same files, same stamps, same ignore rules, same extras) is recognised from the
    index without being read. A folder holding more than ``max_bytes`` of files is refused up front.
    """
    root = root.resolve()
    started_ns = time.time_ns()
    inputs = dict(sorted((inputs or {}).items()))
    lines = ignore_lines(root, [*ignore, *map(ignore_line, inputs)])
    left_out: list[str] = []
    entries = scan(root, lines, left_out)
    secret_files = holding_secrets(root, entries, secrets)
    if secret_files:
        entries = [e for e in entries if e.rel not in secret_files]
    extra = dict(extra or {})
    taken = sorted(set(extra) & {e.rel for e in entries}) if extra else []
    if taken:
        raise UserError(
            f"{root / taken[0]}: cloudddp ships a file of that name with the code",
            hint=f"rename it, or leave it out with code.ignore: [{taken[0]}]",
        )
    file_bytes = sum(map(_SIZE, entries)) + sum(len(data) for data in extra.values())
    largest = largest_files(entries, file_bytes)
    if file_bytes > max_bytes:
        raise UserError(
            f"code.dir {root} holds {human_bytes(file_bytes)} of files to package, over the "
            f"{human_bytes(max_bytes)} limit for a code snapshot; data belongs in inputs:, not in the code folder",
            hint=advice(root, largest),
        )
    directory = cache_dir()
    extras = {name: hashlib.sha256(data).hexdigest() for name, data in sorted(extra.items())}
    index = directory / "index" / f"{key_of(_FORMAT, str(root), lines, extras)}.json"
    stamps = stamps_sha256(entries)
    found = _lookup(root, read_record(index), stamps, directory)
    if found is None:
        sha256, size, checked = _write_archive(root, entries, extra, directory, racy_files(entries, started_ns))
        _prune(directory, keep=sha256)
    else:
        sha256, size, checked = found
    # Racy files (see filestate) are vouched for by their content until they are old enough.
    by_rel = {e.rel: e.stamp for e in entries} if checked else {}
    racy = {rel: digest for rel, digest in checked.items() if by_rel[rel].racy(started_ns)}
    if found is None or racy != checked:
        write_record(index, {"root": str(root), "sha256": sha256, "size": size, "stamps_sha256": stamps, "racy": racy})
    files = tuple(sorted([*map(_NAME, entries), *extra]))
    return Snapshot(
        root,
        files,
        sha256,
        size,
        directory / f"{sha256}.tar.gz",
        file_bytes,
        largest,
        tuple(sorted(left_out)),
        tuple(inputs.items()),
        tuple(secret_files),
    )


SPEC_SUFFIXES = (".yaml", ".yml", ".json")
"""The files looked into for literal secrets: those a job spec (or a copy of one) can be."""


def holding_secrets(root: Path, entries: Sequence[Entry], secrets: Sequence[str]) -> list[str]:
    """The spec files (:data:`SPEC_SUFFIXES`, no bigger than a spec may be) among ``entries`` that hold one of the
    literal ``secrets``: ``cloudddp init`` puts job.yaml in the code folder, and a ``{value: ..., secret: true}``
    there would otherwise ship with the code (to S3, a datastore, a cluster's shared folder)."""
    if not secrets:
        return []
    found = []
    for entry in entries:
        if not entry.rel.endswith(SPEC_SUFFIXES) or entry.stamp.size > SPEC_BYTES:
            continue
        try:
            text = (root / entry.rel).read_bytes()
        except OSError:
            continue
        if any(value.encode() in text for value in secrets):
            found.append(entry.rel)
    return found


def _lookup(
    root: Path, record: dict[str, Any] | None, stamps: str, directory: Path
) -> tuple[str, int, dict[str, str]] | None:
    """``(sha256, size, contents of re-checked racy files)`` when the index vouches for the folder."""
    if record is None or record.get("stamps_sha256") != stamps:
        return None
    sha256, size = str(record.get("sha256")), record.get("size")
    archive = directory / f"{sha256}.tar.gz"
    try:
        if archive.stat().st_size != size or not holds_sha256(archive, sha256):
            return None
        os.utime(archive)  # most recently used: the last to be pruned
    except OSError:
        return None
    contents = {}
    for rel, digest in dict(record.get("racy") or {}).items():
        try:
            if file_sha256(root / rel) != digest:
                return None
        except OSError:
            return None
        contents[rel] = digest
    return sha256, int(size), contents


def holds_sha256(archive: Path, sha256: str) -> bool:
    """Whether the cached ``archive`` still has the content its name says: a cache entry is used only then (an
    archive swapped for another of the same size ran its own code)."""
    try:
        digest = hashlib.sha256()
        with open(archive, "rb") as f:  # the cache's own file: the folder itself stays unread
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        return digest.hexdigest() == sha256
    except OSError:
        return False


def _write_archive(
    root: Path, entries: Sequence[Entry], extra: Mapping[str, bytes], directory: Path, racy: set[str]
) -> tuple[str, int, dict[str, str]]:
    """Stream the archive into the cache: ``(sha256, size, sha256 of each racy file's packed bytes)``.
    Members in name order, the folder's files and the extras together."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".packing-", suffix=".tar.gz")
    except OSError as e:
        raise UserError(
            f"cannot write the code snapshot into {directory}: {e.strerror}",
            hint="set CLOUDDDP_HOME to a writable folder",
        ) from None
    base = str(root) + "/"
    # A scanned path is made of names read from folders: only an extra's name needs safe_member. A file is
    # executable when its owner may run it, as git records it (from the stamp: no syscall per file).
    members: list[Fields] = [
        (rel, base + rel, size, (mode & stat.S_IXUSR) != 0, rel in racy, None) for rel, (size, _, _, _, mode) in entries
    ]
    for name in extra:  # a few, put in their places: members go in name order
        bisect.insort(members, Member.of_bytes(safe_member(name), extra[name]), key=_NAME)
    try:
        with os.fdopen(fd, "wb") as f:
            written = write_targz(f, members)
        os.replace(tmp, directory / f"{written.sha256}.tar.gz")
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise UserError(
            f"packaging {root} failed: {e.strerror}: {e.filename or directory}",
            hint="a file that cannot be read can go in .cloudddpignore; a full disk needs room "
            "in CLOUDDDP_HOME (or another CLOUDDDP_HOME)",
        ) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return written.sha256, written.size, written.digests


def _prune(directory: Path, keep: str) -> None:
    """Delete the least recently used snapshots beyond :data:`CACHE_BYTES` (never a recently used one)."""
    snapshots = []
    cutoff = time.time() - CACHE_GRACE_SECONDS
    for path in directory.glob("*.tar.gz"):
        try:
            st = path.stat()
        except OSError:
            continue
        if not path.name.startswith("."):
            snapshots.append((st.st_mtime, st.st_size, path))
        elif st.st_mtime < cutoff:  # left behind by a packer that was killed
            path.unlink(missing_ok=True)
    total = 0
    for mtime, size, path in sorted(snapshots, reverse=True):
        total += size
        if total > CACHE_BYTES and mtime < cutoff and path.name != f"{keep}.tar.gz":
            path.unlink(missing_ok=True)


def folder_digest(root: Path, files: Iterable[str]) -> str:
    """A content hash over relative paths and bytes (for data folders uploaded file by file).

    Files whose stamps match the last digest are not read again (see :class:`cloudddp.code.filestate.DigestCache`).
    """

    now_ns = time.time_ns()
    cache = DigestCache(root.resolve(), home() / "digests")
    h = hashlib.sha256()
    for rel in files:
        h.update(rel.encode() + b"\0")
        h.update(bytes.fromhex(cache.digest(rel, now_ns)))
    cache.save()
    return h.hexdigest()


def unpacked(archive: Path) -> Path:
    """The snapshot ``archive`` unpacked once, next to it in the snapshot cache (``<sha256>/``): for a
    backend whose own tooling uploads a folder (Azure ML's code asset), so it uploads what was packed."""
    import shutil

    folder = archive.with_name(archive.name.removesuffix(".tar.gz"))
    if folder.is_dir():
        return folder
    tmp = Path(tempfile.mkdtemp(dir=archive.parent, prefix=".unpacking-"))
    try:
        extract(archive, tmp)
        os.replace(tmp, folder)
    except OSError:
        if not folder.is_dir():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # another process unpacked it first
    return folder


def extract(archive: Path, folder: Path) -> None:
    """Unpack a code snapshot (cloudddp's own archive of regular files) into ``folder``."""
    import tarfile

    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:gz") as tar:
        data_only = getattr(tarfile, "data_filter", None)  # refuses links out, absolute paths, devices
        if data_only is not None:
            tar.extractall(folder, filter=data_only)
        else:  # a Python without extraction filters
            tar.extractall(folder)
