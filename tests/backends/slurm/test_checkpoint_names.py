"""The Slurm checkpoint store with names a hostile source chose and links planted at either end, run through the
store's own shell on this machine (the commands are those it runs on a login host): ``sha256sum``'s escaped form, a
255-byte name, a link refused on the cluster's side; and a carry that reports each name its target cannot hold."""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from cloudddp.backends.checkpoints.carry import carry
from cloudddp.backends.checkpoints.store import StoredFile, posix_name
from cloudddp.backends.slurm.checkpoint_store import SlurmCheckpoints
from cloudddp.backends.slurm.shell import Shell
from cloudddp.errors import CloudDDPError

ESCAPED = "back\\slash and\nnewline.pt"
LONG = "x" * 252 + ".pt"
LINKED = re.escape("file.pt: a link, or not inside the checkpoint folder")


def store(folder: Path) -> SlurmCheckpoints:
    return SlurmCheckpoints(Shell(), str(folder))


def test_names_sha256sum_escapes_and_a_255_byte_name_are_written_read_and_hashed(tmp_path: Path) -> None:
    target = store(tmp_path / "ckpt")
    for name, data in ((ESCAPED, b"one"), (LONG, b"two"), (f"sub/{LONG}", b"three")):
        target.write(name, io.BytesIO(data))
        assert target.sha256(name) == hashlib.sha256(data).hexdigest()
        with target.reader(name) as f:
            assert f.read() == data
    assert sorted(p.name for p in (tmp_path / "ckpt").rglob("*")) == sorted([ESCAPED, LONG, "sub", LONG])


def test_a_link_at_either_end_is_refused_on_the_cluster_side_and_nothing_is_written_where_it_points(
    tmp_path: Path,
) -> None:
    secret = tmp_path / "private"
    secret.mkdir()
    (secret / "key").write_bytes(b"private")
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "file.pt").symlink_to(secret / "key")
    (folder / "files").symlink_to(secret)
    source = store(folder)
    with pytest.raises(CloudDDPError, match=LINKED):
        source.sha256("file.pt")
    with pytest.raises(CloudDDPError, match=LINKED), source.reader("file.pt") as f:
        assert f.read() == b""
    with pytest.raises(CloudDDPError, match="files: a link, or not inside the checkpoint folder"):
        source.write("files/authorized_keys", io.BytesIO(b"her key"))
    assert sorted(p.name for p in secret.iterdir()) == ["key"], "something was written through the link"


class Listed:
    """A source holding any name, as an object store lists it (unit test: in memory)."""

    location = "memory"

    def __init__(self, files: dict[str, bytes]) -> None:
        self.data = files

    def files(self) -> list[StoredFile]:
        return [StoredFile(path, len(data)) for path, data in sorted(self.data.items())]

    @contextlib.contextmanager
    def reader(self, path: str) -> Iterator[IO[bytes]]:
        yield io.BytesIO(self.data[path])

    def takes(self, path: str) -> bool:
        return True

    def write(self, path: str, stream: IO[bytes]) -> None:
        self.data[path] = stream.read()

    def sha256(self, path: str) -> str:
        return hashlib.sha256(self.data[path]).hexdigest()

    def remove(self, path: str) -> None:
        self.data.pop(path, None)


def test_a_name_the_target_cannot_hold_is_reported_and_the_rest_is_carried(tmp_path: Path) -> None:
    too_long = "y" * 300 + ".pt"
    source = Listed({too_long: b"a", "a": b"file", "a/b": b"in a folder", "fine.pt": b"ok", ESCAPED: b"esc"})
    assert not posix_name(too_long)
    carried = carry(source, store(tmp_path / "ckpt"))
    assert set(carried.copied) == {"a/b", "fine.pt", ESCAPED} and carried.unnamed == ("a", too_long)
    line = carried.summary()
    assert "not carried, 2 the target cannot name: a, yyy" in line and "\n" not in line
