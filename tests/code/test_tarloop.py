"""The C loops (cloudddp/code/_tarloop.c) list and pack exactly what the Python loops they stand in for do."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cloudddp.code import scan as scanning
from cloudddp.code import snapshot as packaging
from cloudddp.code import tarstream
from cloudddp.code.ignore import ignore_lines
from cloudddp.code.tarstream import CHUNK, Member, Written, header, write_targz
from cloudddp.errors import UserError
from tests.support.cli import ROOT
from tests.support.rigs import on_ci

compiled = tarstream._tarloop
needs_c = pytest.mark.skipif(
    compiled is None and not on_ci(), reason="the C extension is not built here (no C compiler when installed)"
)


def _tree(root: Path) -> Path:
    """A folder with each kind of member the C loop takes or hands back to Python."""
    files = {
        "train.py": b"print(1)\n",
        "empty.txt": b"",
        "run.sh": b"#!/bin/sh\necho hi\n",
        "d" * 99 + ".py": b"long but fits the ustar name field\n",  # 102 characters: PAX
        "x" * 100: b"exactly 100 characters\n",  # the longest plain ustar name
        "caf\u00e9/na\u00efve.py": b"non-ASCII\n",
        "big/data.bin": os.urandom(CHUNK + 4321),  # past a chunk: Python's chunked path
        "block/exact.bin": b"b" * 1024,  # no padding
        "pkg/.gitignore": b"*.tmp\n",  # a nested rule (outside git)
        "pkg/mod.py": b"x = 1\n",
        "pkg/scratch.tmp": b"left out\n",
        "keys/id_rsa": b"secret\n",  # a credential default: left out and said so
        "__pycache__/m.pyc": b"\0",  # an ignored folder
    }
    files.update({f"many/f{i:04d}.py": b"v = %d\n" % i * (i % 50) for i in range(2500)})  # several chunks
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "run.sh").chmod(0o755)
    (root / "link.py").symlink_to("train.py")  # a symlink inside the folder: followed
    (root / "linked").symlink_to("pkg")  # a symlinked folder: checked, not entered
    return root


def _packed(root: Path) -> tuple[list[scanning.Entry], list[str], bytes, Written]:
    left_out: list[str] = []
    entries = scanning.scan(root, ignore_lines(root, []), left_out)
    members: list[tarstream.Fields] = [
        (e.rel, str(root / e.rel), e.stamp.size, bool(e.stamp.mode & 0o100), i % 7 == 0, None)
        for i, e in enumerate(entries)
    ]
    members.insert(3, Member.of_bytes("b-extra.txt", b"shipped with the code\n"))
    out = io.BytesIO()
    written = write_targz(out, members)
    return entries, left_out, out.getvalue(), written


@needs_c
def test_the_c_loops_list_and_pack_the_same_bytes_as_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "s\u00e4ker"  # a path C opens from its bytes (names below are mostly ASCII)
    root.mkdir()
    _tree(root)
    with_c = _packed(root)
    monkeypatch.setattr(tarstream, "_tarloop", None)
    monkeypatch.setattr(scanning, "_tarloop", None)
    assert _packed(root) == with_c
    entries, left_out, archive, written = with_c
    assert left_out == ["keys/id_rsa"]
    rels = [e.rel for e in entries]
    assert "link.py" in rels and "pkg/mod.py" in rels and "pkg/scratch.tmp" not in rels and "linked/mod.py" not in rels
    assert written.sha256 == hashlib.sha256(archive).hexdigest() and len(written.digests) == -(-len(entries) // 7)


@needs_c
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.text(st.characters(min_codepoint=1, max_codepoint=127), min_size=1, max_size=100),
    st.integers(0, 5000),
    st.booleans(),
)
def test_each_member_the_c_loop_packs_is_header_bytes_and_padding(
    tmp_path: Path, name: str, size: int, executable: bool
) -> None:
    data = os.urandom(size)
    path = tmp_path / "member"
    path.write_bytes(data)
    batch = bytearray(b"before")
    assert compiled is not None
    assert compiled.pack(batch, [(name, str(path), size, executable, False, None)], 0, CHUNK) == 1
    assert bytes(batch) == b"before" + header(name, executable, size) + data + bytes(-size % 512)


@needs_c
def test_the_c_loop_hands_back_what_python_must_pack(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    plain = ("f", str(path), 3, False, False, None)
    python_only = [
        ("\u00e9", str(path), 3, False, False, None),  # non-ASCII: PAX
        ("n" * 101, str(path), 3, False, False, None),  # long: PAX
        ("f", str(path), 3, False, True, None),  # hashed
        ("f", "", 3, False, False, b"abc"),  # data
        ("f", str(path), CHUNK + 1, False, False, None),  # past a chunk
        ("f", str(tmp_path / "gone"), 3, False, False, None),  # cannot be opened
        ("f", str(path), 4, False, False, None),  # shorter than listed
    ]
    assert compiled is not None
    for member in python_only:
        batch = bytearray()
        assert compiled.pack(batch, [plain, member, plain], 0, CHUNK) == 1, member
        assert len(batch) == 1024  # the first member alone: header and one block
    accented = tmp_path / "\u00e9t\u00e9"  # an ASCII name from a non-ASCII path: C's, opened from its bytes
    accented.write_bytes(b"abc")
    assert compiled.pack(bytearray(), [("f", str(accented), 3, False, False, None)], 0, CHUNK) == 1
    full = bytearray(CHUNK)
    assert compiled.pack(full, [plain], 0, CHUNK) == 0  # a full batch takes nothing more


@pytest.mark.parametrize("loops", [pytest.param("c", marks=needs_c), "python"])
def test_a_shrunk_or_vanished_file_is_the_same_error_either_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loops: str
) -> None:
    if loops == "python":
        monkeypatch.setattr(tarstream, "_tarloop", None)
    path = tmp_path / "f.py"
    path.write_bytes(b"x = 1\n")
    members = [Member("a.py", str(path), 6, False), Member("f.py", str(path), 60, False)]
    with pytest.raises(UserError, match=r"f\.py shrank while it was being packaged") as shrank:
        write_targz(io.BytesIO(), members)
    assert shrank.value.hint == "package it again"
    with pytest.raises(FileNotFoundError) as gone:  # snapshot words it with the file's name
        write_targz(io.BytesIO(), [Member("g.py", str(tmp_path / "g.py"), 6, False)])
    assert gone.value.filename == str(tmp_path / "g.py")


@needs_c
def test_a_folder_that_cannot_be_listed_is_the_same_error_either_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    not_a_folder = tmp_path / "f.py"  # gone or replaced since it was listed: what root meets (it reads any folder)
    not_a_folder.write_text("x = 1\n")
    with pytest.raises(UserError) as with_c:
        scanning._regular_files(str(not_a_folder), "", bool)
    monkeypatch.setattr(scanning, "_tarloop", None)
    with pytest.raises(UserError) as with_python:
        scanning._regular_files(str(not_a_folder), "", bool)
    assert str(with_c.value) == str(with_python.value)
    assert str(with_c.value).startswith(f"cannot read {not_a_folder}: Not a directory")


def test_without_the_extension_the_python_loops_pack_the_same_archive(tmp_path: Path) -> None:
    """A Python where the extension failed to build (its import stubbed out) packs the same snapshot."""
    root = tmp_path / "code"
    root.mkdir()
    for i in range(300):
        (root / f"m{i:03d}.py").write_bytes(b"x = %d\n" % i)
    (root / ("n" * 120 + ".py")).write_text("long\n")
    program = (
        "import sys; from pathlib import Path\n"
        "if sys.argv[2] == 'stubbed': sys.modules['cloudddp.code._tarloop'] = None\n"
        "from cloudddp.code import scan, snapshot, tarstream\n"
        "print(tarstream._tarloop is None, scan._tarloop is None, snapshot.pack(Path(sys.argv[1])).sha256)\n"
    )
    runs = {}
    for how in ("stubbed", "as installed"):
        env = {**os.environ, "CLOUDDDP_HOME": str(tmp_path / how)}
        done = subprocess.run(
            [sys.executable, "-c", program, str(root), how], capture_output=True, text=True, env=env, cwd=ROOT
        )
        assert done.returncode == 0, done.stderr
        runs[how] = done.stdout.split()
    assert runs["stubbed"][:2] == ["True", "True"]
    assert runs["as installed"][:2] == [str(compiled is None)] * 2
    assert runs["stubbed"][2] == runs["as installed"][2] == packaging.pack(root).sha256


@pytest.mark.skipif(not on_ci(), reason="on CI only: a machine without a C compiler packs in Python")
def test_on_ci_the_extension_is_built() -> None:
    assert compiled is not None, "make venv did not build cloudddp/code/_tarloop.c: is gcc installed?"
