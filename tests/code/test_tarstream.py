"""The streaming archive writer is byte for byte the former tarfile + gzip pack, for any member."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
import tempfile
import zlib
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from cloudddp.code.tarstream import Member, header, write_targz

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
def test_whole_archives_are_the_former_bytes(members: list[tuple[str, bytes, bool]], big: int) -> None:
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
    assert out.getvalue() == tarfile_archive(members)
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
