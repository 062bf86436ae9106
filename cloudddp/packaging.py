"""Code and data snapshots: deterministic archives keyed by their content hash.

The same folder always packs to the same bytes (sorted entries, fixed mtime, uid/gid 0, fixed modes,
gzip header without a timestamp), so its sha256 names it and an unchanged snapshot is never uploaded
twice. Ignore rules: ``.gitignore``, ``.amlignore`` and ``.cloudddpignore`` in the folder, the spec's
``code.ignore``, and defaults (VCS folders, caches, checkpoints). Nothing outside the folder gets in:
``..``, absolute paths and symlinks that point outside are refused.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pathspec

from .errors import UserError

DEFAULT_IGNORES = (
    ".git/", ".hg/", ".svn/", "__pycache__/", "*.pyc", ".ipynb_checkpoints/", ".venv/", "venv/",
    "node_modules/", "checkpoints/", "outputs/", ".cloudddp/", ".DS_Store",
)
IGNORE_FILES = (".gitignore", ".amlignore", ".cloudddpignore")
MAX_FILES = 20_000


@dataclass(frozen=True)
class Snapshot:
    root: Path
    files: tuple[str, ...]  # posix paths relative to root, sorted
    data: bytes  # the .tar.gz
    sha256: str

    @property
    def size(self) -> int:
        return len(self.data)


def _ignore_spec(root: Path, extra: Sequence[str]) -> pathspec.GitIgnoreSpec:
    lines = list(DEFAULT_IGNORES)
    for name in IGNORE_FILES:
        path = root / name
        if path.is_file():
            lines += path.read_text(encoding="utf-8", errors="replace").splitlines()
    lines += list(extra)
    return pathspec.GitIgnoreSpec.from_lines(lines)


def collect(root: Path, ignore: Sequence[str] = ()) -> list[str]:
    """Files to pack, relative to ``root``; refuses anything that would escape it."""
    root = root.resolve()
    if not root.is_dir():
        raise UserError(f"{root} is not a folder")
    spec = _ignore_spec(root, ignore)
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        rel_dir = here.relative_to(root).as_posix()
        keep_dirs = []
        for d in sorted(dirnames):
            rel = f"{rel_dir}/{d}" if rel_dir != "." else d
            if spec.match_file(rel + "/"):
                continue
            if (here / d).is_symlink():
                _check_link(root, here / d, rel)
            keep_dirs.append(d)
        dirnames[:] = keep_dirs
        for f in sorted(filenames):
            rel = f"{rel_dir}/{f}" if rel_dir != "." else f
            if spec.match_file(rel):
                continue
            if (here / f).is_symlink():
                _check_link(root, here / f, rel)
            found.append(rel)
            if len(found) > MAX_FILES:
                raise UserError(f"{root} holds more than {MAX_FILES:,} files to package",
                                hint="leave data out of code.dir (use inputs:), or add ignore patterns")
    return sorted(found)


def _check_link(root: Path, path: Path, rel: str) -> None:
    target = path.resolve()
    if target != root and root not in target.parents:
        raise UserError(f"{rel} is a symlink to {target}, outside the code folder {root}",
                        hint="copy the file into the folder, or add it to .cloudddpignore")


def safe_member(name: str) -> str:
    """A path for inside an archive: relative, normalised, never climbing out."""
    parts = Path(name).parts
    if Path(name).is_absolute() or ".." in parts or not parts:
        raise UserError(f"refusing to package {name!r}: paths must stay inside the code folder")
    return Path(*parts).as_posix()


def pack(root: Path, ignore: Sequence[str] = (), extra: Mapping[str, bytes] | None = None) -> Snapshot:
    """The folder as a deterministic .tar.gz and its sha256; ``extra`` adds files cloudddp ships with the
    code (name in the archive -> bytes), which must not collide with the folder's own."""
    root = root.resolve()
    extra = dict(extra or {})
    taken = sorted(set(extra) & set(collect(root, ignore)))
    if taken:
        raise UserError(f"{root / taken[0]}: cloudddp ships a file of that name with the code",
                        hint=f"rename it, or leave it out with code.ignore: [{taken[0]}]")
    files = sorted([*collect(root, ignore), *extra])
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in files:
            path = root / rel
            info = tarfile.TarInfo(safe_member(rel))
            data = extra[rel] if rel in extra else path.read_bytes()
            info.size = len(data)
            info.mtime = 0
            info.mode = 0o644 if rel in extra else 0o755 if os.access(path, os.X_OK) else 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0, compresslevel=6) as f:
        f.write(raw.getvalue())
    data = gz.getvalue()
    return Snapshot(root, tuple(files), data, hashlib.sha256(data).hexdigest())


def folder_digest(root: Path, files: Iterable[str]) -> str:
    """A content hash over relative paths and bytes (for data folders uploaded file by file)."""
    h = hashlib.sha256()
    for rel in files:
        h.update(rel.encode() + b"\0")
        h.update(hashlib.sha256((root / rel).read_bytes()).digest())
    return h.hexdigest()
