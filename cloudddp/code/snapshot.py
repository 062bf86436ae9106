"""Code and data snapshots: deterministic archives keyed by their content hash.

The same folder always packs to the same bytes (sorted entries, fixed mtime, uid/gid 0, fixed modes,
gzip header without a name or timestamp), so its sha256 names it and an unchanged snapshot is never
uploaded twice. Ignore rules: ``.gitignore``, ``.amlignore`` and ``.cloudddpignore`` in the folder,
the spec's ``code.ignore``, and defaults (VCS folders, caches, checkpoints, files that look like
credentials); and all of git's rules: in a git work tree git itself says what it ignores (nested
``.gitignore`` files, the enclosing repository's, ``.git/info/exclude``, ``core.excludesFile``), elsewhere
``.gitignore`` files in subfolders apply to their subfolder. Nothing outside the folder gets in: ``..``,
absolute paths and symlinks that point outside are refused; neither do FIFOs or devices.

The archive is written in one streaming pass (see :mod:`cloudddp.code.tarstream`) to
``$CLOUDDDP_HOME/snapshots/<sha256>.tar.gz``, so memory stays small whatever the folder
holds. A stat index (see :mod:`cloudddp.code.filestate`) then recognises the unchanged folder on the next
render without reading or packing it again; data folders get the same treatment file by file.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import pathspec
from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

from cloudddp.code.filestate import DigestCache, Stamp, file_sha256, key_of, read_record, write_record
from cloudddp.code.tarstream import Member, write_targz
from cloudddp.errors import UserError
from cloudddp.observe.units import human_bytes
from cloudddp.paths import home

DEFAULT_IGNORES = (
    ".git/",
    ".hg/",
    ".svn/",
    "__pycache__/",
    "*.pyc",
    ".ipynb_checkpoints/",
    ".venv/",
    "venv/",
    "node_modules/",
    "checkpoints/",
    "outputs/",
    ".cloudddp/",
    ".DS_Store",
)
SECRET_IGNORES = (".env", "*.pem", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*")
"""Files that look like credentials (dotenv files, PEM keys and certificates, SSH keys): left out by default,
each named in a note; a ``!<path>`` line in .cloudddpignore (or code.ignore) ships one anyway."""
IGNORE_FILES = (".gitignore", ".amlignore", ".cloudddpignore")
MAX_FILES = 20_000
WARN_BYTES = 50_000_000
"""Snapshots larger than this (compressed) come with a warning naming their largest files."""
MAX_BYTES = 2_000_000_000
"""Folders holding more than this (before compression) are refused before anything is packed."""
LARGEST_SHOWN = 5
CACHE_BYTES = int(os.environ.get("CLOUDDDP_SNAPSHOT_CACHE_BYTES") or 5_000_000_000)
"""Old snapshots are deleted, least recently used first, once the cache holds more than this."""
CACHE_GRACE_SECONDS = 600  # a snapshot used this recently is never deleted (another submit may be uploading it)
_FORMAT = 1  # bump when the archive layout changes, so stale index records stop matching


@dataclass(frozen=True)
class Snapshot:
    """A packed code folder: its .tar.gz on disk, named by its sha256."""

    root: Path
    files: tuple[str, ...]  # posix paths relative to root, sorted
    sha256: str
    size: int  # bytes of the .tar.gz
    path: Path  # the .tar.gz, in the snapshot cache
    file_bytes: int = 0  # bytes of the files before compression
    largest: tuple[tuple[str, int], ...] = ()  # the biggest files and their sizes, biggest first
    left_out: tuple[str, ...] = ()  # files left out only because they look like credentials
    inputs_left_out: tuple[tuple[str, str], ...] = ()  # (path, input name): the job's inputs inside the folder

    def open(self) -> BinaryIO:
        """The archive for reading (to upload it as a stream)."""
        return open(self.path, "rb")


@dataclass(frozen=True)
class _Entry:
    rel: str
    stamp: Stamp


def cache_dir() -> Path:
    return home() / "snapshots"


def _ignore_lines(root: Path, extra: Sequence[str]) -> list[str]:
    lines = [*DEFAULT_IGNORES, *SECRET_IGNORES]  # first, so the folder's own negations can ship one
    for name in IGNORE_FILES:
        path = root / name
        if path.is_file():
            lines += path.read_text(encoding="utf-8", errors="replace").splitlines()
    return lines + list(extra)


class _Ignored:
    """Whether a path is ignored: GitIgnoreSpec's answer. Without negated lines (the usual case) that is
    "any line matches", asked of one regex made of every line's (pathspec's own translation of each), compiled
    once; GitIgnoreSpec itself is built only where that cannot answer, or to word a line that does not compile."""

    _GROUP = re.compile(r"\(\?P<\w+>")

    def __init__(self, lines: Sequence[str]) -> None:
        self._lines = list(lines)
        self.combined: re.Pattern[str] | None = None
        try:
            translated = [GitIgnoreSpecPattern.pattern_to_regex(line) for line in self._lines]
        except ValueError as e:  # a bad line ("!" alone)
            raise _invalid(e) from None
        active = [(regex, include) for regex, include in translated if include is not None]
        if all(include for _, include in active):
            with contextlib.suppress(re.error):  # a reversed character range: GitIgnoreSpec says which line
                self.combined = re.compile(
                    "|".join(f"(?:{self._GROUP.sub('(?:', str(regex))})" for regex, _ in active) or "(?!)"
                )
        if self.combined is None:
            _ = self.spec  # built now, so that a line that does not compile is refused here

    @functools.cached_property
    def spec(self) -> pathspec.GitIgnoreSpec:
        try:
            return pathspec.GitIgnoreSpec.from_lines(self._lines)
        except (ValueError, re.error) as e:  # a bad line, or one whose character range is reversed
            raise _invalid(e) from None

    def __call__(self, rel: str) -> bool:
        if self.combined is not None:
            return self.combined.search(rel) is not None
        return self.spec.match_file(rel)


def _invalid(e: Exception) -> UserError:
    return UserError(
        f"an ignore rule is not a valid pattern: {e}",
        hint="check .gitignore, .amlignore and .cloudddpignore in the code folder, and code.ignore",
    )


def git_ignored(root: Path) -> set[str] | None:
    """What git ignores under ``root`` (paths relative to it; a wholly ignored folder as ``dir/``), when
    ``root`` is in a git work tree and git is installed; None otherwise. Git's answer covers every rule it
    has: nested ``.gitignore`` files, the enclosing repository's, ``.git/info/exclude``, ``core.excludesFile``."""
    git = shutil.which("git")
    if git is None:
        return None
    try:  # one call: outside a work tree (no repository, a bare one, inside .git) ls-files fails, and None says so
        listed = subprocess.run(
            [git, "-C", str(root), "ls-files", "--others", "--ignored", "--exclude-standard", "--directory", "-z"]
            + ["--", "."],
            capture_output=True,
            timeout=300,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listed.returncode != 0:
        return None
    return {os.fsdecode(path) for path in listed.stdout.split(b"\0") if path}


class _Rules:
    """Whether the scan leaves a path out: the folder's own rules (:class:`_Ignored`) and git's. In a git work
    tree git's list answers; elsewhere each ``.gitignore`` below the top applies to its own folder (pathspec's
    gitignore semantics within it; a deeper file cannot re-include what a shallower one ignores)."""

    def __init__(self, root: Path, lines: Sequence[str]) -> None:
        self.own = _Ignored(lines)
        self.git = git_ignored(root)
        self.nested: dict[str, _Ignored] = {}  # folder ("sub/") -> its .gitignore, outside a git work tree
        self._lines = lines
        self._without_secret: _Ignored | None = None

    def enter(self, rel_dir: str, here: str) -> None:
        """Note the ``.gitignore`` of folder ``rel_dir`` (outside a git work tree; git reads its own)."""
        if self.git is None and rel_dir:
            path = Path(here) / ".gitignore"
            if path.is_file():
                self.nested[rel_dir] = _Ignored(path.read_text(encoding="utf-8", errors="replace").splitlines())

    def __call__(self, rel: str) -> bool:
        if self.own(rel) or (self.git is not None and rel in self.git):
            return True
        return any(rel.startswith(folder) and rules(rel[len(folder) :]) for folder, rules in self.nested.items())

    def looks_secret(self, rel: str) -> bool:
        """Left out by the credential defaults alone (not by a rule of the folder's or git's)."""
        if not _secret_rules().match_file(rel):
            return False
        if self._without_secret is None:
            secret = set(SECRET_IGNORES)
            self._without_secret = _Ignored([line for line in self._lines if line not in secret])
        return not self._without_secret(rel) and not (self.git is not None and rel in self.git)


@functools.cache
def _secret_rules() -> pathspec.GitIgnoreSpec:
    """:data:`SECRET_IGNORES` alone, compiled when a left-out file is first asked about."""
    return pathspec.GitIgnoreSpec.from_lines(SECRET_IGNORES)


def _scan(root: Path, lines: Sequence[str], left_out: list[str] | None = None) -> list[_Entry]:
    """The files to pack with their stamps, sorted; refuses anything that would escape ``root``. Files left
    out only because they look like credentials are added to ``left_out``.

    Symlinks inside the folder are followed for files; a symlinked folder is checked but not entered."""
    if not root.is_dir():
        raise UserError(f"{root} is not a folder")
    ignored = _Rules(root, lines)
    found: list[_Entry] = []
    pending = [("", str(root))]
    while pending:
        rel_dir, here = pending.pop()
        ignored.enter(rel_dir, here)
        try:
            with os.scandir(here) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as e:
            raise UserError(
                f"cannot read {here}: {e.strerror}", hint="fix its permissions, or add it to .cloudddpignore"
            ) from None
        for entry in entries:
            rel = rel_dir + entry.name
            if _is_dir(entry):
                if not ignored(rel + "/"):
                    if entry.is_symlink():
                        _check_link(root, Path(entry.path), rel)
                    else:
                        pending.append((rel + "/", entry.path))
                continue
            if ignored(rel):
                if left_out is not None and ignored.looks_secret(rel):
                    left_out.append(rel)
                continue
            if entry.is_symlink():
                _check_link(root, Path(entry.path), rel)
            try:
                st = entry.stat()
            except FileNotFoundError:
                raise UserError(
                    f"{rel} in {root} is a broken symlink", hint="fix or delete the link, or add it to .cloudddpignore"
                ) from None
            if not stat.S_ISREG(st.st_mode):  # a FIFO would block the packer forever; a device, read endlessly
                raise UserError(
                    f"{rel} in {root} is a {_kind(st.st_mode)}, not a regular file: a code snapshot holds files only",
                    hint=f"delete it, or add the line {ignore_line(rel)} to .cloudddpignore",
                )
            stamp = Stamp.of(st)
            found.append(_Entry(rel, stamp))
            if len(found) > MAX_FILES:
                raise UserError(
                    f"{root} holds more than {MAX_FILES:,} files to package",
                    hint="leave data out of code.dir (use inputs:), or add ignore patterns",
                )
    found.sort(key=lambda e: e.rel)
    return found


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    kinds = [
        (stat.S_ISFIFO, "FIFO (named pipe)"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    ]
    return next((name for test, name in kinds if test(mode)), "special file")


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()  # follows symlinks, as os.walk does
    except OSError:
        return False


def collect(root: Path, ignore: Sequence[str] = ()) -> list[str]:
    """Files to pack, relative to ``root``; refuses anything that would escape it."""
    root = root.resolve()
    return [e.rel for e in _scan(root, _ignore_lines(root, ignore))]


def _check_link(root: Path, path: Path, rel: str) -> None:
    target = path.resolve()
    if target != root and root not in target.parents:
        raise UserError(
            f"{rel} is a symlink to {target}, outside the code folder {root}",
            hint="copy the file into the folder, or add it to .cloudddpignore",
        )


def safe_member(name: str) -> str:
    """A path for inside an archive: relative, normalised, never climbing out."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if name.startswith("/") or ".." in parts or not parts:
        raise UserError(f"refusing to package {name!r}: paths must stay inside the code folder")
    return "/".join(parts)


# -- what is being shipped -------------------------------------------------------------------------


def ignore_line(rel: str) -> str:
    """The .gitignore-style line that leaves out the file ``rel``: anchored, wildcards escaped.

    Exactly that file, unless its name holds characters no ignore line can spell (a newline, other
    control or separator characters): each of those becomes ``?``, which also matches one other character.
    """
    line = "".join("\\" + c if c in "\\*?[]" else c if c.isprintable() else "?" for c in rel)
    spaces = len(line) - len(line.rstrip(" "))  # trailing spaces would be stripped unless escaped
    return "/" + line[: len(line) - spaces] + "\\ " * spaces


def _advice(root: Path, largest: Sequence[tuple[str, int]]) -> str:
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
        + _advice(snapshot.root, snapshot.largest)
    ]


def _largest(entries: Sequence[_Entry], total: int) -> tuple[tuple[str, int], ...]:
    """The biggest files, those worth leaving out (1% of the total or more; always the biggest one)."""
    biggest = sorted(entries, key=lambda e: (-e.stamp.size, e.rel))[:LARGEST_SHOWN]
    return tuple((e.rel, e.stamp.size) for i, e in enumerate(biggest) if i == 0 or e.stamp.size * 100 >= total)


# -- packing ---------------------------------------------------------------------------------------


def pack(
    root: Path,
    ignore: Sequence[str] = (),
    extra: Mapping[str, bytes] | None = None,
    *,
    max_bytes: int = MAX_BYTES,
    inputs: Mapping[str, str] | None = None,
) -> Snapshot:
    """The folder as a deterministic .tar.gz in the snapshot cache, and its sha256; ``extra`` adds files
    cloudddp ships with the code (name in the archive -> bytes), which must not collide with the folder's own.
    ``inputs`` (a path relative to ``root`` -> the input's name) are the job's data inside the folder: they
    travel as inputs, so they are left out of the snapshot (and said so in :func:`snapshot_warnings`).

    An unchanged folder (same files, same stamps, same ignore rules, same extras) is recognised from the
    index without being read. A folder holding more than ``max_bytes`` of files is refused up front.
    """
    root = root.resolve()
    started_ns = time.time_ns()
    inputs = dict(sorted((inputs or {}).items()))
    lines = _ignore_lines(root, [*ignore, *map(ignore_line, inputs)])
    left_out: list[str] = []
    entries = _scan(root, lines, left_out)
    extra = dict(extra or {})
    taken = sorted(set(extra) & {e.rel for e in entries})
    if taken:
        raise UserError(
            f"{root / taken[0]}: cloudddp ships a file of that name with the code",
            hint=f"rename it, or leave it out with code.ignore: [{taken[0]}]",
        )
    file_bytes = sum(e.stamp.size for e in entries) + sum(len(data) for data in extra.values())
    largest = _largest(entries, file_bytes)
    if file_bytes > max_bytes:
        raise UserError(
            f"code.dir {root} holds {human_bytes(file_bytes)} of files to package, over the "
            f"{human_bytes(max_bytes)} limit for a code snapshot; data belongs in inputs:, not in the code folder",
            hint=_advice(root, largest),
        )
    directory = cache_dir()
    extras = {name: hashlib.sha256(data).hexdigest() for name, data in sorted(extra.items())}
    index = directory / "index" / f"{key_of(_FORMAT, str(root), lines, extras)}.json"
    stamps = [[e.rel, *e.stamp] for e in entries]
    found = _lookup(root, read_record(index), stamps, directory)
    if found is None:
        young = {e.rel for e in entries if e.stamp.racy(started_ns)}
        sha256, size, checked = _write_archive(root, entries, extra, directory, young)
        _prune(directory, keep=sha256)
    else:
        sha256, size, checked = found
    # Racy files (see filestate) are vouched for by their content until they are old enough.
    by_rel = {e.rel: e.stamp for e in entries}
    racy = {rel: digest for rel, digest in checked.items() if by_rel[rel].racy(started_ns)}
    if found is None or racy != checked:
        write_record(index, {"root": str(root), "sha256": sha256, "size": size, "stamps": stamps, "racy": racy})
    files = tuple(sorted([*(e.rel for e in entries), *extra]))
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
    )


def _lookup(
    root: Path, record: dict[str, Any] | None, stamps: list[list[Any]], directory: Path
) -> tuple[str, int, dict[str, str]] | None:
    """``(sha256, size, contents of re-checked racy files)`` when the index vouches for the folder."""
    if record is None or record.get("stamps") != stamps:
        return None
    sha256, size = str(record.get("sha256")), record.get("size")
    archive = directory / f"{sha256}.tar.gz"
    try:
        if archive.stat().st_size != size:
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


def _write_archive(
    root: Path, entries: Sequence[_Entry], extra: Mapping[str, bytes], directory: Path, racy: set[str]
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
    base = str(root)
    order = sorted([*((e.rel, e) for e in entries), *((name, None) for name in extra)], key=lambda item: item[0])
    members = (
        Member.of_bytes(safe_member(rel), extra[rel])
        if e is None
        else Member(safe_member(rel), path, e.stamp.size, os.access(path, os.X_OK), rel in racy)
        for rel, e in order
        for path in [os.path.join(base, rel)]
    )
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
