"""A Slurm rank joins only the rendezvous its own user's node 0 wrote: an endpoint file another Unix user owns, one
others may write, a link or a FIFO planted in its place is refused before anything connects (the wrapper run as each
rank runs it: ``python -c``, ``read``); the working folder the file lives in is judged where a link to it points."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cloudddp.backends.slurm.agent import STORE
from cloudddp.backends.slurm.preflight import PRIVATE
from tests.support import users


def joined(endpoint: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", STORE, str(endpoint), "", "0", "read"], capture_output=True, text=True, timeout=timeout
    )


def test_an_endpoint_file_another_user_owns_or_a_link_is_refused(tmp_path: Path) -> None:
    other = users.required("a second user writing a rendezvous endpoint")
    endpoint = tmp_path / ".cloudddp-rendezvous"
    endpoint.write_text("127.0.0.1:29500")
    mine = joined(endpoint)
    assert mine.returncode == 0 and mine.stdout.strip() == "127.0.0.1:29500", mine.stderr
    os.chown(endpoint, other.uid, other.gid)  # hers: she chose where the ranks connect
    refused = joined(endpoint)
    assert refused.returncode != 0 and refused.stdout == "", refused
    assert "is not a file of this user that only it may write: not joining the rendezvous" in refused.stderr
    endpoint.unlink()
    real = tmp_path / "elsewhere"
    real.write_text("127.0.0.1:29500")
    endpoint.symlink_to(real)
    linked = joined(endpoint)
    assert linked.returncode != 0 and linked.stdout == "" and "is not a file of this user" in linked.stderr


def test_a_planted_endpoint_others_may_write_or_a_fifo_is_refused_and_a_linked_run_folder_is_followed(
    tmp_path: Path,
) -> None:
    run_folder = tmp_path / "run"
    run_folder.mkdir()
    endpoint = run_folder / ".cloudddp-rendezvous"
    endpoint.write_text("127.0.0.1:29500")
    endpoint.chmod(0o666)  # ours, but anyone who reaches it could write her own address into it
    writable = joined(endpoint)
    assert writable.returncode != 0 and writable.stdout == "", writable
    assert "is not a file of this user that only it may write" in writable.stderr
    endpoint.unlink()
    os.mkfifo(endpoint, 0o600)  # opening a FIFO waits for a writer: the rank would hang, never refuse
    fifo = joined(endpoint, timeout=20)
    assert fifo.returncode != 0 and fifo.stdout == "" and "is not a file of this user" in fifo.stderr, fifo
    endpoint.unlink()
    endpoint.write_text("127.0.0.1:29500")
    endpoint.chmod(0o600)
    (tmp_path / "linked").symlink_to(run_folder)  # the working folder reached through a link of ours
    linked = joined(tmp_path / "linked" / endpoint.name)
    assert linked.returncode == 0 and linked.stdout.strip() == "127.0.0.1:29500", linked


def test_a_working_folder_is_judged_where_a_link_to_it_points(tmp_path: Path) -> None:
    """Preflight's check, run as the cluster runs it (``bash -c``): a link to a private folder passes (the link's
    own mode, 777 on Linux, says nothing), a link to a folder others may write in, or to one in a folder anyone may
    write in without the sticky bit (she could rename it away and put hers there), fails, naming why."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    open_folder.chmod(0o777)
    inside = open_folder / "work"
    inside.mkdir(mode=0o700)
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    (sticky / "work").mkdir(mode=0o700)
    said = {}
    for name, target in (("private", private), ("open", open_folder), ("inside", inside), ("sticky", sticky / "work")):
        link = tmp_path / f"to-{name}"
        link.symlink_to(target)
        checked = subprocess.run(["bash", "-c", PRIVATE, "-", str(link)], capture_output=True, text=True, timeout=30)
        said[name] = (checked.returncode, checked.stdout.strip())
    assert said == {
        "private": (0, ""),
        "open": (1, "others may write in it"),
        "inside": (1, f"anyone may write in {open_folder} on its path"),
        "sticky": (0, ""),
    }
