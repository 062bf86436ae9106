"""What another user could plant for us to use: a home folder of hers, a status file she could write,
a cached snapshot swapped for another of the same size, a symlinked checkpoint lock, a lock squatted in /tmp; and
each of them reached through a link, judged where the link points."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudddp.backends.folderlock import FolderLock
from cloudddp.backends.local import LocalBackend
from cloudddp.backends.procs import Process
from cloudddp.code.snapshot import pack
from cloudddp.errors import UserError
from cloudddp.injob import keepfiles
from cloudddp.paths import UnsafeFolder
from tests.support import users
from tests.support.cli import FIXTURES, cli
from tests.support.victim import Victim


@pytest.fixture
def other() -> users.OtherUser:
    return users.required("a second user planting state")


def test_a_home_another_user_owns_or_may_write_in_is_refused(tmp_path: Path, other: users.OtherUser) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o777)
    os.chown(theirs, other.uid, other.gid)
    refused = cli("list", env={"CLOUDDDP_HOME": str(theirs)})
    assert refused.returncode == 2, refused
    assert f"CLOUDDDP_HOME {theirs} belongs to another user" in refused.stderr and "Traceback" not in refused.stderr
    open_one = tmp_path / "open"
    open_one.mkdir()
    open_one.chmod(0o777)
    refused = cli("list", env={"CLOUDDDP_HOME": str(open_one)})
    assert refused.returncode == 2 and "is writable by others (mode 777)" in refused.stderr, refused
    readable = tmp_path / "readable"  # ours, only readable by others: closed to 0700, as before
    readable.mkdir()
    readable.chmod(0o755)
    assert cli("list", env={"CLOUDDDP_HOME": str(readable)}).returncode == 0
    assert readable.stat().st_mode & 0o777 == 0o700


def test_a_status_file_others_could_write_is_refused_and_cancel_signals_nothing(cloudddp_home: Path) -> None:
    victim = Victim()
    try:
        run = cloudddp_home / "runs" / "tiny-20260101-000000-beef"
        run.mkdir(parents=True)
        me = Process.of(victim.pid)
        assert me is not None
        forged = {"state": "running", "supervisor_pid": victim.pid, "supervisor": me.record(), "nodes": 1}
        (run / "status.json").write_text(json.dumps({**forged, "node_pgids": [victim.pid], "node_processes": []}))
        (run / "status.json").chmod(0o666)  # as if another user had written it
        with pytest.raises(UnsafeFolder, match=r"the run.s status file .* is writable by others"):
            LocalBackend().cancel(run.name)
        assert victim.signals() == ["SIGWINCH"]  # only our probe
    finally:
        victim.stop()


def test_a_cached_snapshot_swapped_for_another_of_the_same_size_is_never_used(tmp_path: Path) -> None:
    folder = tmp_path / "code"
    shutil.copytree(FIXTURES / "tinyjob", folder)
    first = pack(folder)
    planted = tmp_path / "planted.tar.gz"
    with tarfile.open(planted, "w:gz") as tar:
        tar.add(folder / "job.yaml", arcname="train.py")  # her own train.py
    data = planted.read_bytes()
    assert len(data) < first.size
    first.path.write_bytes(data + b"\0" * (first.size - len(data)))  # padded to the cached archive's size
    again = pack(folder)  # the same folder: the index vouches for it, the content does not
    assert again.sha256 == first.sha256
    with tarfile.open(again.path, "r:gz") as tar:
        member = tar.extractfile("train.py")
        assert member is not None and b"dist.init_process_group" in member.read()


def test_a_symlinked_checkpoint_lock_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    folder = tmp_path / "shared-checkpoints"
    folder.mkdir()
    (folder / ".cloudddp.lock").symlink_to(target)
    me = Process.of(os.getpid())
    assert me is not None
    with pytest.raises(UserError, match="is a symbolic link"):
        FolderLock(folder).acquire("run-1", [me])
    assert target.read_text() == "keep me\n"


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder both users reach (the test's own tmp_path is closed to her), holding an open folder (anyone may
    replace what it holds) and a folder of hers."""
    folder = Path(tempfile.mkdtemp(prefix="cloudddp-planted-"))
    folder.chmod(0o755)
    (folder / "open").mkdir()
    (folder / "open").chmod(0o777)
    yield folder
    shutil.rmtree(folder)


def hers(shared: Path, other: users.OtherUser) -> Path:
    folder = shared / "hers"
    folder.mkdir(mode=0o755, exist_ok=True)
    os.chown(folder, other.uid, other.gid)
    return folder


def test_a_status_file_or_run_folder_linked_to_an_open_or_foreign_place_is_refused_and_cancel_signals_nothing(
    cloudddp_home: Path, shared: Path, other: users.OtherUser
) -> None:
    victim = Victim()
    try:
        me = Process.of(victim.pid)
        assert me is not None
        forged = {"state": "running", "supervisor_pid": victim.pid, "supervisor": me.record(), "nodes": 1}
        runs = cloudddp_home / "runs"
        runs.mkdir()
        for parent, why in ((shared / "open", "is writable by others (mode 777)"), (hers(shared, other), "belongs")):
            kept = parent / f"run-{parent.name}"
            kept.mkdir(mode=0o700)  # ours, private: only the folder above it is not
            (kept / "status.json").write_text(json.dumps({**forged, "node_pgids": [victim.pid]}))
            (kept / "status.json").chmod(0o600)
            run = runs / f"tiny-20260101-000000-{parent.name}"
            run.mkdir()
            (run / "status.json").symlink_to(kept / "status.json")  # the file linked
            (runs / f"tiny-20260101-000001-{parent.name}").symlink_to(kept)  # the whole run folder linked
            for name in (run.name, f"tiny-20260101-000001-{parent.name}"):
                with pytest.raises(UnsafeFolder, match=re.escape(f"the folder {parent} on its path {why}")):
                    LocalBackend().cancel(name)
        assert victim.signals() == ["SIGWINCH"]  # only our probe
        private = cloudddp_home / "kept"
        private.mkdir(mode=0o700)
        (private / "status.json").write_text(json.dumps({**forged, "state": "succeeded"}))
        (runs / "tiny-20260101-000002-mine").symlink_to(private)  # a link to a place of ours alone is followed
        assert LocalBackend().status("tiny-20260101-000002-mine").state.value == "succeeded"
    finally:
        victim.stop()


def test_a_checkpoint_folder_linked_to_an_open_or_foreign_place_or_a_lock_others_could_write_is_refused(
    tmp_path: Path, shared: Path, other: users.OtherUser, cloudddp_home: Path
) -> None:
    me = Process.of(os.getpid())
    assert me is not None
    for parent, why in ((shared / "open", "is writable by others (mode 777)"), (hers(shared, other), "belongs")):
        target = parent / "checkpoints"
        target.mkdir(mode=0o700)  # ours, private: only the folder above it is not
        link = tmp_path / f"ckpt-to-{parent.name}"
        link.symlink_to(target)
        with pytest.raises(UnsafeFolder, match=re.escape(f"checkpoint.path: the folder {parent} on its path {why}")):
            FolderLock(link).acquire("run-1", [me])
        assert not list(target.iterdir()), "a lock was written where the link points"
    refused = cli(
        "submit", str(FIXTURES / "tinyjob" / "job.yaml"), "-o", f"checkpoint.path={link}", "--detach", "--quiet"
    )
    assert refused.returncode == 2, refused
    assert f"the folder {parent} on its path belongs to another user" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr and not list((parent / "checkpoints").iterdir())

    folder = tmp_path / "mine"
    folder.mkdir()
    lock = folder / ".cloudddp.lock"
    lock.write_text(json.dumps({"run_id": "hers", "holders": [{"pid": me.pid, **me.record()}]}))
    for owner, mode in ((other.uid, 0o600), (os.getuid(), 0o666)):  # hers, or ours but anyone may write it
        os.chown(lock, owner, -1)
        lock.chmod(mode)
        with pytest.raises(
            UnsafeFolder, match=re.escape(f"the checkpoint folder's lock {lock} is not a file of yours")
        ):
            FolderLock(folder).acquire("run-1", [me])
    lock.unlink()
    private = tmp_path / "private-ckpt"
    private.mkdir(mode=0o700)
    (tmp_path / "ckpt-to-mine").symlink_to(private)  # a link to a folder of ours alone is followed
    FolderLock(tmp_path / "ckpt-to-mine").acquire("run-1", [me])
    held = FolderLock(private).holder()
    assert held is not None and held["run_id"] == "run-1"


_HOLD = """
import fcntl, os, sys, time
for path in sys.argv[1:]:
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(60)
"""


def test_a_keep_lock_squatted_by_another_user_does_not_stall_the_saving(
    tmp_path: Path, other: users.OtherUser, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared_tmp = Path(tempfile.mkdtemp(dir="/tmp"))  # a /tmp of its own, open to everyone like /tmp
    shared_tmp.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(shared_tmp))
    keepfiles._private_folder.cache_clear()
    squatted = shared_tmp / f"cloudddp-{os.getuid()}"  # the private folder's name, made first by her
    made = other.run(["mkdir", "-m", "777", str(squatted)])
    assert made.returncode == 0, made.stderr
    workdir, checkpoints = tmp_path / "code", tmp_path / "ckpt"
    workdir.mkdir()
    checkpoints.mkdir()
    keeper = keepfiles.Keeper(["vocab.json"], str(workdir), str(checkpoints))
    digest = hashlib.sha256(str(keeper.workdir).encode()).hexdigest()[:16]
    names = [str(squatted / f"keep-{digest}.lock"), str(shared_tmp / f"cloudddp-keep-{os.getuid()}-{digest}.lock")]
    argv = [
        "setpriv",
        f"--reuid={other.uid}",
        f"--regid={other.gid}",
        "--clear-groups",
        sys.executable,
        "-I",
        "-S",
        "-c",
        _HOLD,
    ]
    holder = subprocess.Popen([*argv, *names], stdout=subprocess.PIPE, text=True, cwd="/")
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        taken = threading.Event()

        def lock() -> None:
            with keeper._lock():
                taken.set()

        threading.Thread(target=lock, daemon=True).start()
        assert taken.wait(10), "the saving waited on a lock another user holds"
    finally:
        holder.kill()
        holder.wait()
        keepfiles._private_folder.cache_clear()
        shutil.rmtree(shared_tmp, ignore_errors=True)
