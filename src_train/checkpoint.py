"""Checkpoints that survive being killed mid-write, and that are checked before they are trusted.

Rank 0 writes ``ckpt-e<epoch>-s<step>.pt`` to a temporary file in the same folder, fsyncs it and
renames it into place, then writes ``<name>.sha256`` the same way. A checkpoint counts only when its
checksum file exists and matches: a process killed mid-write leaves at worst a stray temp file or a
checkpoint without its checksum, and the previous checkpoint is used. The newest ``keep`` are kept.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

_NAME = re.compile(r"^ckpt-e(\d{4,})-s(\d{7,})\.pt$")


def _atomic_write(path: Path, payload: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def save(folder: Path, epoch: int, step_in_epoch: int, state: dict[str, Any], keep: int = 2) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    torch.save(state, buf)
    payload = buf.getvalue()
    path = folder / f"ckpt-e{epoch:04d}-s{step_in_epoch:07d}.pt"
    _atomic_write(path, payload)
    _atomic_write(path.with_name(path.name + ".sha256"), hashlib.sha256(payload).hexdigest().encode())
    for old in candidates(folder)[keep:]:
        old.unlink(missing_ok=True)
        old.with_name(old.name + ".sha256").unlink(missing_ok=True)
    return path


def candidates(folder: Path) -> list[Path]:
    """Checkpoint files, newest position first."""
    if not folder.is_dir():
        return []
    found = [(tuple(map(int, m.groups())), p) for p in folder.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found, reverse=True)]


def load_latest(folder: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint whose checksum matches; corrupt or torn ones are skipped with a warning."""
    for path in candidates(folder):
        digest_file = path.with_name(path.name + ".sha256")
        try:
            payload = path.read_bytes()
            expected = digest_file.read_text().strip()
        except OSError:
            print(f"warning: skipping checkpoint {path.name}: no checksum file (write was interrupted)", file=sys.stderr)
            continue
        if hashlib.sha256(payload).hexdigest() != expected:
            print(f"warning: skipping checkpoint {path.name}: checksum mismatch (corrupt or truncated)", file=sys.stderr)
            continue
        try:
            state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=False)
        except Exception as e:  # a file that hashes right but does not load is still not usable
            print(f"warning: skipping checkpoint {path.name}: cannot load ({e})", file=sys.stderr)
            continue
        return path, state
    return None
