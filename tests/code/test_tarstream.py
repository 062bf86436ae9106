"""The streaming archive writer holds byte for byte the tar stream of the former tarfile + gzip pack, for any
member, and its gzip bytes are the former ones wherever the tar stream is one deflate block."""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import os
import tarfile
import tempfile
import threading
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cloudddp.code import blockgzip
from cloudddp.code.tarstream import Member, header, write_targz
from cloudddp.errors import UserError

names = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), min_size=1, max_size=150)


def tarfile_archive(members: list[tuple[str, bytes, bool]]) -> bytes:
    """The former pack(): every member through TarFile.addfile into a BytesIO, then gzip in one write."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, executable in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            info.mode = 0o755 if executable else 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, compresslevel=6) as f:
        f.write(raw.getvalue())
    return out.getvalue()


@settings(max_examples=500, deadline=None)
@given(names, st.booleans(), st.one_of(st.integers(0, 10**6), st.integers(8**11 - 2, 8**11 + 2)))
def test_every_header_is_the_one_tarfile_writes(name: str, executable: bool, size: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, 0, 0o755 if executable else 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    assert header(name, executable, size) == info.tobuf(tarfile.PAX_FORMAT, tarfile.ENCODING, "strict")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(names.filter(lambda n: "/" not in n), st.binary(max_size=3000), st.booleans()),
        max_size=8,
        unique_by=lambda m: m[0],
    ),
    st.integers(0, 2**20 + 1000),
)
def test_archives_hold_the_former_tar_bytes_and_one_block_the_former_gzip_bytes(
    members: list[tuple[str, bytes, bool]], big: int
) -> None:
    members = [*members, ("big.bin", os.urandom(big), False)]  # one member past the 1 MiB write batch
    with tempfile.TemporaryDirectory() as tmp:
        listed = []
        for i, (name, data, executable) in enumerate(members):
            path = Path(tmp) / str(i)
            path.write_bytes(data)
            if i % 3 == 2:  # a member given as bytes (a file cloudddp ships with the code)
                members[i] = (name, data, False)
                listed.append(Member.of_bytes(name, data))
            else:
                listed.append(Member(name, str(path), len(data), executable, hashed=i % 2 == 0))
        out = io.BytesIO()
        written = write_targz(out, listed)
    former = tarfile_archive(members)
    assert gzip.decompress(out.getvalue()) == gzip.decompress(former)  # the tar stream, byte for byte
    if len(gzip.decompress(former)) <= blockgzip.BLOCK_BYTES:  # one deflate block: the gzip bytes too
        assert out.getvalue() == former
    assert written.size == len(out.getvalue())
    assert written.sha256 == hashlib.sha256(out.getvalue()).hexdigest()
    assert written.digests == {
        m.name: hashlib.sha256(d).hexdigest() for m, (_, d, _) in zip(listed, members, strict=True) if m.hashed
    }


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=1, max_size=200_000), st.lists(st.integers(1, 200_000), max_size=12), st.integers(0, 255))
def test_the_deflate_stream_does_not_depend_on_how_its_input_is_cut(data: bytes, cuts: list[int], seed: int) -> None:
    data = data * (1 + seed % 4)  # some repetition, so matches cross the cuts
    whole = zlib.compressobj(6, zlib.DEFLATED, -15)
    expected = whole.compress(data) + whole.flush()
    pieces = zlib.compressobj(6, zlib.DEFLATED, -15)
    out, start = b"", 0
    for cut in sorted(cuts):
        out += pieces.compress(data[start:cut])
        start = max(start, cut)
    assert out + pieces.compress(data[start:]) + pieces.flush() == expected


class _FullDisk(io.BytesIO):
    """A sink with room for ``room`` bytes, then ENOSPC, as a full disk answers."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room

    def write(self, data: bytes) -> int:  # type: ignore[override]
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return len(data)


def _in_a_thread(call: Callable[[], object]) -> BaseException | None:
    """What ``call`` raised, run where a hang shows as a failure instead of a stuck test."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            raised.append(e)

    before = threading.active_count()
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "write_targz hung"
    assert threading.active_count() == before, "the compressing thread outlived write_targz"
    return raised[0] if raised else None


def test_a_failing_disk_is_raised_to_the_packer_which_never_hangs(tmp_path: Path) -> None:
    members = []
    for i in range(12):  # far more than the queue holds: the packer would block on a thread that stopped taking
        path = tmp_path / f"f{i}"
        path.write_bytes(os.urandom(2**20))
        members.append(Member(f"f{i}", str(path), 2**20, executable=False))
    raised = _in_a_thread(lambda: write_targz(_FullDisk(100_000), members))
    assert isinstance(raised, OSError) and raised.errno == errno.ENOSPC


@pytest.mark.parametrize("size", [100, 2**20 + 10], ids=["one read", "chunked"])
def test_a_file_that_shrank_since_it_was_listed_is_a_user_error(tmp_path: Path, size: int) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * (size - 50))
    raised = _in_a_thread(lambda: write_targz(io.BytesIO(), [Member("f", str(path), size, executable=False)]))
    assert isinstance(raised, UserError) and "shrank" in str(raised)
