"""Code snapshots: deterministic bytes, ignore rules, and nothing from outside the code folder."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
import time
import zlib
from pathlib import Path

import pytest

from cloudddp.errors import UserError
from cloudddp.packaging import pack, safe_member

from .support.trees import pinned_tree

# Recorded from the in-memory pack() (tar into BytesIO, then gzip) before packaging became a streaming
# pass: the archive of pinned_tree() must stay exactly these bytes, or every cached snapshot in S3
# would be uploaded again under a new name.
PINNED_TAR_SHA256 = "0a3ce5f1df45c9d4639869fb67ba1f75454938e76a027dc61508b87fa40eeb73"
PINNED_TAR_BYTES = 419_840
PINNED_ZLIB = "1.2.13"
PINNED_TGZ_SHA256 = "2ddd52480864e30e9a3a7c236c484720696682442b4ed68123724f306c547a5d"
PINNED_TGZ_BYTES = 301_193


def make_tree(root: Path) -> None:
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    (root / "pkg" / "model.py").write_text("X = 1\n")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\0")
    (root / "notes.ipynb").write_text("{}")
    (root / "data").mkdir()
    (root / "data" / "big.bin").write_bytes(b"x" * 100)
    (root / ".gitignore").write_text("data/\n")
    (root / ".cloudddpignore").write_text("*.ipynb\n")


def test_same_folder_same_bytes_and_ignore_rules(tmp_path: Path) -> None:
    make_tree(tmp_path / "a")
    first = pack(tmp_path / "a")
    time.sleep(1.1)
    os.utime(tmp_path / "a" / "train.py")  # a new mtime changes nothing
    second = pack(tmp_path / "a")
    assert first.data == second.data and first.sha256 == second.sha256
    assert first.files == (".cloudddpignore", ".gitignore", "pkg/model.py", "train.py")
    with tarfile.open(fileobj=io.BytesIO(first.data)) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == list(first.files)
    assert {m.mtime for m in members} == {0} and {m.uid for m in members} == {0}
    (tmp_path / "a" / "train.py").write_text("print('changed')\n")
    assert pack(tmp_path / "a").sha256 != first.sha256
    assert "pkg/model.py" not in pack(tmp_path / "a", ["pkg/"]).files


def test_symlinks_out_of_the_folder_are_refused_and_inside_ones_kept(tmp_path: Path) -> None:
    make_tree(tmp_path / "code")
    (tmp_path / "secret.txt").write_text("do not ship")
    (tmp_path / "code" / "inside.py").symlink_to(tmp_path / "code" / "train.py")
    assert "inside.py" in pack(tmp_path / "code").files
    (tmp_path / "code" / "leak.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(UserError, match="outside the code folder"):
        pack(tmp_path / "code")


@pytest.mark.parametrize("name", ["../etc/passwd", "/etc/passwd", "a/../../b", ""])
def test_archive_member_names_never_climb_out(name: str) -> None:
    with pytest.raises(UserError):
        safe_member(name)
    assert safe_member("pkg/./model.py") == "pkg/model.py"


def test_archive_bytes_are_pinned_across_implementations(tmp_path: Path) -> None:
    snapshot = pack(pinned_tree(tmp_path / "code"))
    data = snapshot.data
    assert hashlib.sha256(data).hexdigest() == snapshot.sha256 and len(data) == snapshot.size
    tar = gzip.decompress(data)
    assert (hashlib.sha256(tar).hexdigest(), len(tar)) == (PINNED_TAR_SHA256, PINNED_TAR_BYTES)
    assert data[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # no name, mtime 0, "unknown OS"
    if zlib.ZLIB_RUNTIME_VERSION != PINNED_ZLIB:
        pytest.skip(f"the pinned .tar.gz digest was recorded with zlib {PINNED_ZLIB}; this Python has "
                    f"{zlib.ZLIB_RUNTIME_VERSION}, whose deflate may choose other (equally valid) bytes")
    assert (snapshot.sha256, snapshot.size) == (PINNED_TGZ_SHA256, PINNED_TGZ_BYTES)
