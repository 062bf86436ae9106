"""Code snapshots: deterministic bytes, ignore rules, and nothing from outside the code folder."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import time
import zlib
from pathlib import Path

import pathspec
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cloudddp.code import blockgzip, filestate
from cloudddp.code import ignore as rules
from cloudddp.code import snapshot as packaging
from cloudddp.code.ignore import ignore_line
from cloudddp.code.scan import Entry, collect
from cloudddp.code.shipped import largest_files, snapshot_warnings
from cloudddp.code.snapshot import folder_digest, pack, safe_member
from cloudddp.errors import UserError
from cloudddp.injob import shim
from tests.support.cli import ROOT, cli
from tests.support.trees import age, pinned_tree

# Recorded from the in-memory pack() (tar into BytesIO, then gzip) before packaging became a streaming
# pass, without and with a file shipped alongside (``extra``): the archive of pinned_tree() must stay
# exactly these bytes, or every cached snapshot in S3 would be uploaded again under a new name.
# (extra, sha256 of the tar, its bytes, sha256 of the .tar.gz with zlib 1.2.13, its bytes)
PINNED_ZLIB = "1.2.13"
PINS = [
    (
        {},
        "0a3ce5f1df45c9d4639869fb67ba1f75454938e76a027dc61508b87fa40eeb73",
        419_840,
        "2ddd52480864e30e9a3a7c236c484720696682442b4ed68123724f306c547a5d",
        301_193,
    ),
    (
        {"_cloudddp_launch.py": b"print('launch')\n"},
        "07daa25d5d4babd9d84a78de0dce4f084fa8a52d87a979543472305072279eef",
        419_840,
        "05deed3cad24e35df4f2721e36b3acb563ca84ca4f71fc7d9e05dcdac319b675",
        301_241,
    ),
]


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
    assert first.path.read_bytes() == second.path.read_bytes() and first.sha256 == second.sha256
    assert first.files == (".cloudddpignore", ".gitignore", "pkg/model.py", "train.py")
    with tarfile.open(fileobj=first.open()) as tar:
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


@pytest.mark.parametrize(
    ("extra", "tar_sha256", "tar_bytes", "tgz_sha256", "tgz_bytes"), PINS, ids=["code", "code+extra"]
)
def test_archive_bytes_are_pinned_across_implementations(
    tmp_path: Path, extra: dict[str, bytes], tar_sha256: str, tar_bytes: int, tgz_sha256: str, tgz_bytes: int
) -> None:
    snapshot = pack(pinned_tree(tmp_path / "code"), extra=extra)
    data = snapshot.path.read_bytes()
    assert hashlib.sha256(data).hexdigest() == snapshot.sha256 and len(data) == snapshot.size
    tar = gzip.decompress(data)
    assert (hashlib.sha256(tar).hexdigest(), len(tar)) == (tar_sha256, tar_bytes)
    assert data[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # no name, mtime 0, "unknown OS"
    if zlib.ZLIB_RUNTIME_VERSION != PINNED_ZLIB:
        pytest.skip(
            f"the pinned .tar.gz digest was recorded with zlib {PINNED_ZLIB}; this Python has "
            f"{zlib.ZLIB_RUNTIME_VERSION}, whose deflate may choose other (equally valid) bytes"
        )
    assert (snapshot.sha256, snapshot.size) == (tgz_sha256, tgz_bytes)


# -- the snapshot cache and the stat index ---------------------------------------------------------


def _refuse(*_: object, **__: object) -> None:
    raise AssertionError("the folder was read although its stamps vouch for it")


def test_an_unchanged_folder_is_recognised_without_reading_or_packing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cloudddp_home: Path
) -> None:
    root = pinned_tree(tmp_path / "code")
    age(root)
    first = pack(root)
    assert first.path.parent == cloudddp_home / "snapshots" and first.path.name == f"{first.sha256}.tar.gz"
    with monkeypatch.context() as m:
        m.setattr(packaging, "_write_archive", _refuse)
        m.setattr(packaging, "file_sha256", _refuse)
        m.setattr(packaging, "write_targz", _refuse)
        again = pack(root)
    assert again == first
    (root / "pkg" / "model.py").write_bytes(b"X = 2\n" * 200)  # same size, new mtime and ctime
    changed = pack(root)
    assert changed.sha256 != first.sha256
    with tarfile.open(changed.path) as tar:
        assert tar.extractfile("pkg/model.py").read().startswith(b"X = 2")  # type: ignore[union-attr]
    (root / "run.sh").chmod(0o644)  # only the mode changes: the archive's mode for it must follow
    assert pack(root).sha256 != changed.sha256
    assert pack(root, ["run.sh"]).files != pack(root).files  # other ignore rules, another index record


def test_a_file_rewritten_within_the_racy_window_is_checked_by_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Same-tick rewrites (same size, same mtime, same ctime) cannot be staged on purpose; dropping ctime
    # from the stamp and restoring the mtime by hand gives the index exactly the view it would have.
    monkeypatch.setattr(
        filestate.Stamp, "of", classmethod(lambda cls, st: cls(st.st_size, st.st_mtime_ns, 0, st.st_ino, st.st_mode))
    )
    root = tmp_path / "code"
    root.mkdir()
    (root / "train.py").write_text("lr = 0.1\n")
    first = pack(root)  # train.py was written just now: racy, so its content is recorded
    before = os.stat(root / "train.py")
    (root / "train.py").write_text("lr = 0.2\n")
    os.utime(root / "train.py", ns=(before.st_atime_ns, before.st_mtime_ns))
    second = pack(root)
    assert second.sha256 != first.sha256
    with tarfile.open(second.path) as tar:
        assert tar.extractfile("train.py").read() == b"lr = 0.2\n"  # type: ignore[union-attr]
    # Once the file is older than the window, the index stops re-reading it.
    monkeypatch.setattr(filestate, "RACY_NS", 0)
    assert pack(root) == second  # checked by content one last time, then recorded as settled
    monkeypatch.setattr(packaging, "file_sha256", _refuse)
    monkeypatch.setattr(packaging, "_write_archive", _refuse)
    assert pack(root) == second


def test_a_file_dated_past_2262_is_packed_then_recognised_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "code"
    root.mkdir()
    (root / "train.py").write_text("print(1)\n")
    far = 10**19  # 2286: more nanoseconds than 64 signed bits hold
    os.utime(root / "train.py", ns=(far, far))
    if os.stat(root / "train.py").st_mtime_ns != far:
        pytest.skip("this file system cannot date a file that far ahead")
    first = pack(root)
    monkeypatch.setattr(packaging, "_write_archive", _refuse)  # read again by content (it is racy), not packed
    assert pack(root) == first


def test_packing_streams_so_memory_does_not_grow_with_the_folder(tmp_path: Path) -> None:
    import tracemalloc

    root = tmp_path / "code"
    root.mkdir()
    (root / "model.ckpt").write_bytes(os.urandom(48 * 2**20))
    tracemalloc.start()
    try:
        snapshot = pack(root)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert snapshot.size > 48 * 2**20  # random bytes do not compress: the archive is as big as the file
    bound = 8 * 2**20 + blockgzip.threads() * 3 * blockgzip.BLOCK_BYTES  # a block and its output per deflate thread
    assert peak < bound, f"peak {peak:,} bytes of Python allocations for a {48 * 2**20:,}-byte file"


def test_old_snapshots_are_pruned_least_recently_used_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packaging, "CACHE_GRACE_SECONDS", 0)
    snapshots = []
    for i in range(3):
        root = tmp_path / f"code{i}"
        root.mkdir()
        (root / "blob.bin").write_bytes(os.urandom(100_000))
        snapshots.append(pack(root))
        past = time.time() - 100 + i
        os.utime(snapshots[-1].path, (past, past))
    os.utime(pack(tmp_path / "code0").path)  # code0 used again: now the most recent
    monkeypatch.setattr(packaging, "CACHE_BYTES", 250_000)  # room for two
    root = tmp_path / "code3"
    root.mkdir()
    (root / "small.py").write_text("x = 1\n")
    newest = pack(root)
    left = {p.name for p in newest.path.parent.glob("*.tar.gz")}
    assert left == {newest.path.name, snapshots[0].path.name, snapshots[2].path.name}
    assert pack(tmp_path / "code1").path.exists()  # a pruned snapshot is simply packed again


def test_data_folder_digests_reuse_the_recorded_file_hashes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "data"
    (root / "shards").mkdir(parents=True)
    for i in range(3):
        (root / "shards" / f"{i}.bin").write_bytes(os.urandom(1000))
    age(root)
    files = collect(root)
    expected = hashlib.sha256()
    for rel in files:  # the definition: path, NUL, then the sha256 of the file's bytes
        expected.update(rel.encode() + b"\0" + hashlib.sha256((root / rel).read_bytes()).digest())
    assert folder_digest(root, files) == expected.hexdigest()
    with monkeypatch.context() as m:
        m.setattr(filestate, "file_sha256", _refuse)
        assert folder_digest(root, files) == expected.hexdigest()
    (root / "shards" / "1.bin").write_bytes(os.urandom(1000))
    assert folder_digest(root, files) != expected.hexdigest()


# -- saying what is shipped ------------------------------------------------------------------------


def test_large_snapshots_warn_with_each_big_file_and_the_line_that_leaves_it_out(tmp_path: Path) -> None:
    root = tmp_path / "code"
    (root / "runs").mkdir(parents=True)
    (root / "train.py").write_text("print('train')\n")
    (root / "runs" / "last.ckpt").write_bytes(os.urandom(300_000))
    (root / "vocab [v2].txt").write_bytes(os.urandom(200_000))
    snapshot = pack(root)
    assert snapshot_warnings(snapshot) == []  # far below the default threshold
    [warning] = snapshot_warnings(snapshot, threshold=100_000)
    assert f"{snapshot.size / 1000:.1f} kB compressed" in warning and str(root / ".cloudddpignore") in warning
    rows = warning.splitlines()[1:]
    assert [row.split() for row in rows[:2]] == [
        ["300.0", "kB", "runs/last.ckpt", "/runs/last.ckpt"],
        ["200.0", "kB", "vocab", "[v2].txt", "/vocab", "\\[v2\\].txt"],
    ]
    for rel in ("runs/last.ckpt", "vocab [v2].txt"):  # each line, given as code.ignore, leaves out that file only
        assert pack(root, [ignore_line(rel)]).files == tuple(f for f in snapshot.files if f != rel)


def test_the_largest_files_are_named_biggest_first_and_equal_sizes_in_name_order() -> None:
    sizes = {"a.bin": 10, "b.bin": 30, "c.bin": 30, "d.bin": 1, "e.bin": 30, "f.bin": 20, "g.bin": 30}
    entries = [Entry(rel, filestate.Stamp(size, 0, 0, 0, 0o100644)) for rel, size in sorted(sizes.items())]
    assert largest_files(entries, sum(sizes.values())) == (
        ("b.bin", 30),
        ("c.bin", 30),
        ("e.bin", 30),
        ("g.bin", 30),
        ("f.bin", 20),
    )


def test_an_absurd_snapshot_is_refused_before_anything_is_packed(tmp_path: Path, cloudddp_home: Path) -> None:
    root = tmp_path / "code"
    root.mkdir()
    (root / "train.py").write_text("print('train')\n")
    (root / "dataset.npy").write_bytes(b"\0" * 3_000_000)
    with pytest.raises(UserError) as info:
        pack(root, max_bytes=2_000_000)
    message = str(info.value)
    assert "3.0 MB of files" in message and "2.0 MB limit" in message and "inputs:" in message
    assert "3.0 MB  dataset.npy" in message and "/dataset.npy" in message
    assert not list((cloudddp_home / "snapshots").glob("*.tar.gz"))
    assert pack(root, ["/dataset.npy"], max_bytes=2_000_000).files == ("train.py",)


names = st.text(
    st.characters(blacklist_characters="/\0", blacklist_categories=("Cs",)), min_size=1, max_size=12
).filter(lambda s: s not in (".", ".."))


@settings(max_examples=300, deadline=None)
@given(st.lists(names, min_size=1, max_size=3), st.lists(st.lists(names, min_size=1, max_size=3), max_size=6))
def test_the_suggested_ignore_line_matches_exactly_its_file(parts: list[str], others: list[list[str]]) -> None:
    rel = "/".join(parts)
    spec = pathspec.GitIgnoreSpec.from_lines([ignore_line(rel)])
    assert spec.match_file(rel)
    if not rel.isprintable():
        return  # see ignore_line: unprintable characters are spelled "?", which matches others too
    for other in ["/".join(o) for o in others] + [rel + "x", "x" + rel, "sub/" + rel]:
        if other != rel and not other.startswith(rel + "/"):  # rel is a file: nothing lies under it
            assert not spec.match_file(other), (rel, other)


line_chars = st.sampled_from(list("ab.*?[]!#\\/ (P<>)-|"))
path_parts = st.text(st.sampled_from(list("ab.*?[]!#\\ (P<>)-|")), min_size=1, max_size=5).filter(
    lambda s: s not in (".", "..")
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.text(line_chars, max_size=10), max_size=6),
    st.lists(st.lists(path_parts, min_size=1, max_size=3), min_size=1, max_size=8),
    st.booleans(),
)
def test_the_combined_ignore_regex_answers_as_gitignorespec(
    lines: list[str], paths: list[list[str]], defaults: bool
) -> None:
    lines = [*rules.DEFAULT_IGNORES, *lines] if defaults else lines
    try:
        ignored = rules._Ignored(lines)
    except UserError:
        assume(False)  # not a valid pattern (a lone "!"): refused as a user error, nothing to compare
    for rel in ["/".join(p) for p in paths]:
        for path in (rel, rel + "/"):
            assert ignored(path) == ignored.spec.match_file(path), (lines, path, ignored.combined)


def test_an_invalid_ignore_line_is_a_user_error(tmp_path: Path) -> None:
    make_tree(tmp_path / "code")
    (tmp_path / "code" / ".cloudddpignore").write_text("!\n")
    with pytest.raises(UserError, match="not a valid pattern"):
        pack(tmp_path / "code")


def test_files_cloudddp_ships_with_the_code_are_packed_in_order_and_may_not_collide(tmp_path: Path) -> None:
    root = pinned_tree(tmp_path / "code")
    snapshot = pack(root, extra={"_launch.py": b"print('launch')\n"})
    assert "_launch.py" in snapshot.files and list(snapshot.files) == sorted(snapshot.files)
    with tarfile.open(snapshot.path) as tar:
        assert tar.getnames() == list(snapshot.files)
        info = tar.getmember("_launch.py")
        assert info.mode == 0o644 and tar.extractfile(info).read() == b"print('launch')\n"  # type: ignore[union-attr]
    assert pack(root, extra={"_launch.py": b"print('other')\n"}).sha256 != snapshot.sha256  # not the cached one
    with pytest.raises(UserError, match="ships a file of that name"):
        pack(root, extra={"train.py": b""})


def test_an_ignore_line_whose_range_is_reversed_is_a_user_error(tmp_path: Path) -> None:
    root = tmp_path / "code"
    root.mkdir()
    (root / "train.py").write_text("print('train')\n")
    with pytest.raises(UserError, match="not a valid pattern"):
        pack(root, ["[z-a].py"])  # pathspec's regex fails to compile (re.error, not ValueError)


def test_a_fifo_or_device_in_the_folder_is_refused_by_name_without_being_opened(tmp_path: Path) -> None:
    """Opening a FIFO with no writer blocks forever (render hung); it is refused from its stat alone."""
    (tmp_path / "train.py").write_text("print(1)\n")
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(UserError, match=r"pipe in .* is a FIFO \(named pipe\), not a regular file") as refused:
        pack(tmp_path)
    assert "/pipe" in (refused.value.hint or "")  # the ignore line that leaves it out
    (tmp_path / ".cloudddpignore").write_text("/pipe\n")
    assert pack(tmp_path).files == (".cloudddpignore", "train.py")
    if os.geteuid() == 0:  # only root may make a device node
        os.mknod(tmp_path / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))  # what /dev/null is
        with pytest.raises(UserError, match=r"null in .* is a character device, not a regular file"):
            pack(tmp_path)


def _tree_with_rules_everywhere(repo: Path) -> Path:
    """A code folder inside a larger repository, with something for each of git's rule sources to ignore."""
    code = repo / "proj"
    files = {
        ".gitignore": "creds.json\n",  # the enclosing repository's rule, above the code folder
        "proj/train.py": "print(1)\n",
        "proj/creds.json": "{}\n",
        "proj/local-notes.txt": "mine\n",  # .git/info/exclude
        "proj/sub/.gitignore": "secrets.yaml\n",  # a nested rule
        "proj/sub/secrets.yaml": "token: x\n",
        "proj/sub/keep.py": "x = 1\n",
        "proj/.env": "TOKEN=x\n",  # credential defaults
        "proj/certs/server.pem": "-----BEGIN-----\n",
        "proj/keys/id_ed25519": "key\n",
        "proj/id_utils.py": "y = 2\n",  # not a key: shipped
    }
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    return code


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to make the enclosing repository")
def test_every_git_ignore_rule_and_credential_defaults_leave_files_out(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    code = _tree_with_rules_everywhere(repo)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".git" / "info" / "exclude").write_text("local-notes.txt\n")
    snapshot = pack(code)
    assert snapshot.files == ("id_utils.py", "sub/.gitignore", "sub/keep.py", "train.py")
    assert snapshot.left_out == (".env", "certs/server.pem", "keys/id_ed25519")
    (note,) = snapshot_warnings(snapshot)
    assert "look like credentials: .env, certs/server.pem, keys/id_ed25519" in note
    (code / "job.yaml").write_text("name: rules\ncode: {dir: ., entry: train.py}\n")
    listed = cli("render", str(code / "job.yaml"), "--list-files")  # what a person sees before shipping
    assert listed.returncode == 0 and listed.stdout.split() == [
        "_cloudddp_culprit.py",
        "_cloudddp_hang.py",
        "_cloudddp_hooks.py",
        "_cloudddp_hooks_lightning.py",
        "_cloudddp_hooks_transformers.py",
        "_cloudddp_init.py",
        "_cloudddp_interconnect.py",
        "_cloudddp_launch.py",
        "_cloudddp_lines.py",
        "_cloudddp_logs.py",
        "_cloudddp_mpi.py",
        "_cloudddp_pace.py",
        "_cloudddp_preload.py",
        "_cloudddp_rank_stacks.py",
        "_cloudddp_resume_arg.py",
        "_cloudddp_stack_requests.py",
        "_cloudddp_start.py",
        "id_utils.py",
        "job.yaml",
        "sub/.gitignore",
        "sub/keep.py",
        "train.py",
    ], listed.stdout + listed.stderr
    assert "look like credentials: .env, certs/server.pem, keys/id_ed25519" in " ".join(listed.stderr.split())
    (code / ".cloudddpignore").write_text("!/.env\n")  # shipping one anyway
    assert ".env" in pack(code).files


def test_outside_a_git_work_tree_nested_gitignore_files_still_apply(tmp_path: Path) -> None:
    code = _tree_with_rules_everywhere(tmp_path / "plain")
    assert rules.git_ignored(code) is None  # no repository here
    files = pack(code).files
    assert "sub/secrets.yaml" not in files and "sub/keep.py" in files and ".env" not in files


def test_outside_any_repository_git_is_not_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GIT_DIR", raising=False)
    monkeypatch.setattr(subprocess, "run", _refuse)
    assert rules.git_ignored(tmp_path) is None
    (tmp_path / ".git").write_text("gitdir: elsewhere\n")  # a linked work tree's .git is a file: git is asked
    with pytest.raises(AssertionError):
        rules.git_ignored(tmp_path / "sub")


def test_the_launchers_environment_folder_is_private_and_a_planted_one_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shim.tempfile, "tempdir", str(tmp_path))
    made = shim.private_folder()
    assert made == tmp_path / f"cloudddp-{os.getuid()}" and stat.S_IMODE(made.stat().st_mode) == 0o700
    made.chmod(0o777)  # others may write in it: someone could have put an environment there
    other = shim.private_folder()
    assert other != made and other.parent == tmp_path and stat.S_IMODE(other.stat().st_mode) == 0o700
    made.rmdir()
    made.symlink_to(tmp_path / "elsewhere", target_is_directory=True)  # a planted link
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    assert shim.private_folder() not in (made, tmp_path / "elsewhere")


# Each default ignore as the docs name it, written out here (not read from DEFAULT_IGNORES, which a broken
# default would shrink along with the test): a folder of that name at the top of the code folder and inside it.
DEFAULT_IGNORED_FOLDERS = (
    ".git",
    ".hg",
    ".svn",
    "__pycache__",
    ".ipynb_checkpoints",
    ".venv",
    "venv",
    "node_modules",
    "checkpoints",
    "outputs",
    ".cloudddp",
)


@pytest.mark.parametrize("folder", DEFAULT_IGNORED_FOLDERS)
def test_each_default_ignored_folder_is_left_out_at_the_top_and_inside_a_code_folder(
    tmp_path: Path, folder: str
) -> None:
    code = tmp_path / "code"
    for where in (code / folder, code / "pkg" / folder):
        where.mkdir(parents=True)
        (where / "part-0.bin").write_bytes(b"\0" * 16)
    (code / "train.py").write_text("print('hi')\n")
    (code / "pkg" / "model.py").write_text("X = 1\n")
    assert pack(code).files == ("pkg/model.py", "train.py")


def test_default_ignored_files_are_left_out_wherever_they_are(tmp_path: Path) -> None:
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    for rel in ("x.pyc", "pkg/y.pyc", ".DS_Store", "pkg/.DS_Store"):
        (code / rel).write_bytes(b"\0")
    (code / "train.py").write_text("print('hi')\n")
    assert pack(code).files == ("train.py",)


def test_the_default_lines_are_translated_as_pathspec_translates_them() -> None:
    from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

    lines = [*rules.DEFAULT_IGNORES, *rules.SECRET_IGNORES]
    assert {line: GitIgnoreSpecPattern.pattern_to_regex(line) for line in lines} == rules.TRANSLATED


PACK_PROBE = """
import sys
from pathlib import Path
from cloudddp.code.snapshot import pack
pack(Path(sys.argv[1]))
print("pathspec" in sys.modules, *sorted(name for name in ("pydantic", "tarfile", "subprocess") if name in sys.modules))
"""


def test_a_folder_with_no_rules_of_its_own_is_packed_without_importing_pathspec(tmp_path: Path) -> None:
    """The defaults' translations are written out; pathspec is imported for a folder's own rules only, and a plain
    folder's pack imports neither the spec's pydantic, nor tarfile, nor subprocess."""
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "pkg" / "x.pyc").write_bytes(b"\0")  # left out by a default rule, asked whether it looks secret
    (code / "train.py").write_text("print('hi')\n")
    env = {**os.environ, "CLOUDDDP_HOME": str(tmp_path / "home")}

    def imports_pathspec() -> str:
        result = subprocess.run(
            [sys.executable, "-c", PACK_PROBE, str(code)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    # Nor, outside a repository and with no secrets to look for, the spec's pydantic, tarfile or subprocess,
    # which would take longer to import than packing a small folder does.
    assert imports_pathspec() == "False"
    (code / ".cloudddpignore").write_text("*.log\n")
    assert imports_pathspec() == "True"


def test_a_file_is_packed_executable_when_its_owner_may_run_it(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    modes = {"owner.sh": 0o744, "everyone.sh": 0o755, "group_only.sh": 0o654, "plain.py": 0o644}
    for name, mode in modes.items():
        (code / name).write_text("echo hi\n")
        (code / name).chmod(mode)
    with tarfile.open(pack(code).path) as tar:
        packed = {m.name: m.mode for m in tar.getmembers()}
    assert packed == {"owner.sh": 0o755, "everyone.sh": 0o755, "group_only.sh": 0o644, "plain.py": 0o644}
