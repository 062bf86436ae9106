"""Checkpoints that survive being killed mid-write, and that are checked before they are trusted.

Rank 0 writes ``ckpt-e<epoch>-s<step>.pt``, then ``<name>.sha256`` with the payload's SHA-256, each
through :func:`storage.write_file` (atomic rename where the filesystem allows it, in place on mounts
that refuse renames; read back and checked either way). A checkpoint counts only when its checksum file
exists and matches: a process killed mid-write leaves at worst a stray temporary file, a torn payload
or a payload without its checksum, and the previous checkpoint is used. The newest ``keep`` are kept.

Checkpoints hold tensors and plain data only (dicts, lists, numbers, strings: RNG state as a tensor) and
are loaded with ``torch.load(weights_only=True)``: whoever can write the checkpoint folder (a datastore's
contributors, a shared workdir's group) could otherwise plant a file, with a matching checksum, that runs
code when it is unpickled. Such a file is refused by name and skipped.

A checkpoint that cannot be written is reported and skipped: training goes on, and the newest valid
checkpoint stays the one a restart resumes from.
"""

from __future__ import annotations

import hashlib
import io
import pickle
import re
import sys
from pathlib import Path
from typing import Any

import torch

from . import storage

_NAME = re.compile(r"^ckpt-e(\d{4,})-s(\d{7,})\.pt$")


def save(folder: Path, epoch: int, step_in_epoch: int, state: dict[str, Any], keep: int = 2) -> Path | None:
    """Write a checkpoint; ``None`` (after a warning on stderr) when it could not be written."""
    path = folder / f"ckpt-e{epoch:04d}-s{step_in_epoch:07d}.pt"
    buf = io.BytesIO()
    torch.save(state, buf)
    payload = buf.getvalue()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for leftover in storage.leftover_temp_files(folder, "ckpt-e*"):
            leftover.unlink(missing_ok=True)
        storage.write_file(path, payload)
        storage.write_file(digest_file(path), hashlib.sha256(payload).hexdigest().encode())
    except OSError as e:
        print(
            f"warning: checkpoint {path.name} was not written ({e}); training goes on, and a restart "
            "resumes from the previous checkpoint",
            file=sys.stderr,
            flush=True,
        )
        for part in (digest_file(path), path):
            try:
                part.unlink(missing_ok=True)
            except OSError:
                pass  # unreadable leftovers are skipped by load_latest
        return None
    _prune(folder, keep)
    return path


def digest_file(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def candidates(folder: Path) -> list[Path]:
    """Checkpoint files, newest position first."""
    if not folder.is_dir():
        return []
    found = [(tuple(map(int, m.groups())), p) for p in folder.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found, reverse=True)]


def _prune(folder: Path, keep: int) -> None:
    """Keep the newest ``keep`` checkpoints that have a checksum; drop older ones and checksum-less leftovers."""
    kept = 0
    for path in candidates(folder):
        if digest_file(path).exists() and kept < keep:
            kept += 1
            continue
        try:
            path.unlink(missing_ok=True)
            digest_file(path).unlink(missing_ok=True)
        except OSError as e:  # a mount may refuse deletes too; an extra old checkpoint harms nothing
            print(f"warning: could not delete old checkpoint {path.name} ({e})", file=sys.stderr, flush=True)


def load_latest(folder: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint whose checksum matches; corrupt or torn ones are skipped with a warning."""
    for path in candidates(folder):
        try:
            expected = digest_file(path).read_text().strip()
        except OSError:
            print(
                f"warning: skipping checkpoint {path.name}: no checksum file (write was interrupted)", file=sys.stderr
            )
            continue
        try:
            payload = path.read_bytes()
        except OSError as e:
            print(f"warning: skipping checkpoint {path.name}: cannot read it ({e})", file=sys.stderr)
            continue
        if hashlib.sha256(payload).hexdigest() != expected:
            print(
                f"warning: skipping checkpoint {path.name}: checksum mismatch (corrupt or truncated)", file=sys.stderr
            )
            continue
        try:
            # weights_only: tensors and plain data only. The checksum proves the file is whole, not who wrote
            # it; a full unpickle of a planted file would run its code as this job's user.
            state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as e:
            why = str(e).splitlines()[-1][:200] if str(e) else type(e).__name__
            print(
                f"warning: refusing checkpoint {path.name}: it holds more than tensors and plain data, which could "
                f"run code when loaded; it was not loaded ({why})",
                file=sys.stderr,
            )
            continue
        except Exception as e:  # noqa: BLE001  # a file that hashes right but does not load is still not usable
            print(f"warning: skipping checkpoint {path.name}: cannot load ({e})", file=sys.stderr)
            continue
        return path, state
    return None
