"""gzip with its deflate work shared by threads (cloudddp/code/blockgzip.py): one gzip member that every reader
takes, the same bytes whatever the threads and however the input arrives, as small as one long stream; zlib's
deflate for a stream of one block, zlib-ng's for a longer one."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st
from zlib_ng import zlib_ng

from cloudddp.code import blockgzip

BLOCK = blockgzip.BLOCK_BYTES


def compressed(data: bytes, cuts: list[int], workers: int) -> bytes:
    out = io.BytesIO()
    gz = blockgzip.BlockGzip(out.write, workers)
    at = 0
    for cut in sorted(cuts):
        gz.write(data[at:cut])
        at = cut
    gz.write(data[at:])
    gz.close()
    return out.getvalue()


def text_like(size: int) -> bytes:
    """Compressible bytes with matches across every block boundary: numbered lines, as source code repeats."""
    lines = b"".join(b"def f%d(x):\n    return x * %d + %d\n" % (i, i % 97, i % 13) for i in range(size // 20))
    return lines[:size]


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 3 * BLOCK + 5), st.lists(st.integers(0, 3 * BLOCK + 5), max_size=6), st.integers(1, 4))
def test_the_bytes_depend_only_on_the_data(size: int, cuts: list[int], workers: int) -> None:
    data = text_like(size)
    got = compressed(data, [c for c in cuts if c <= len(data)], workers)
    assert got == compressed(data, [], 1)
    assert gzip.decompress(got) == data


def test_one_block_is_what_gzipfile_writes() -> None:
    data = text_like(BLOCK)
    former = io.BytesIO()
    with gzip.GzipFile(filename="", fileobj=former, mode="wb", mtime=0, compresslevel=6) as f:
        f.write(data)
    assert compressed(data, [1000], 2) == former.getvalue()


def test_many_blocks_are_one_gzip_member_that_gzip_itself_reads_and_as_small_as_one_stream() -> None:
    data = text_like(5 * BLOCK + 12345) + os.urandom(BLOCK // 2) + text_like(BLOCK)
    got = compressed(data, [BLOCK - 1, 3 * BLOCK + 7], 2)
    reader = zlib.decompressobj(31)  # one gzip member, header and trailer checked
    assert reader.decompress(got) == data and reader.eof and reader.unused_data == b""
    assert subprocess.run(["gzip", "-dc"], input=got, capture_output=True, check=True).stdout == data
    one_stream = zlib_ng.compress(data, 6, -zlib.MAX_WBITS)  # zlib-ng's deflate, as for every stream this long
    assert len(got) <= 1.01 * (len(one_stream) + 18), (len(got), len(one_stream))  # priming keeps the matches
    unprimed = b"".join(zlib_ng.compress(data[i : i + BLOCK], 6) for i in range(0, len(data), BLOCK))
    assert len(got) < len(unprimed)
    assert len(got) <= 1.1 * len(gzip.compress(data, compresslevel=6, mtime=0))  # zlib's own, for comparison


def test_a_stream_longer_than_one_block_is_deflated_by_zlib_ng_from_its_first_block() -> None:
    """One byte more than a block: zlib-ng's bytes from the first block on, however the writes come (a stream of
    one block is zlib's: the test above)."""
    two = text_like(BLOCK + 1)
    raw = zlib_ng.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    first = raw.compress(two[:BLOCK]) + raw.flush(zlib.Z_SYNC_FLUSH)
    assert compressed(two, [BLOCK], 2)[10 : 10 + len(first)] == first
    assert compressed(two, [3], 1) == compressed(two, [BLOCK], 2)
