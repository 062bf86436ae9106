"""Where this machine keeps cloudddp's state: ``$CLOUDDDP_HOME``, or ``~/.cloudddp``.

Every wing that keeps something between commands (the run database, snapshots, digests, measured step times,
recovery chains, local run folders) finds its folder under :func:`home`, so this is the one module they all
share and it imports nothing of cloudddp.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def home() -> Path:
    """The state folder, created on first use, private to its owner (0700): it holds run folders, plans,
    logs and checkpoints. An existing one of ours that others could enter is closed too."""
    path = Path(os.environ.get("CLOUDDDP_HOME") or Path.home() / ".cloudddp")
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    refuse_unless_private(path, "CLOUDDDP_HOME")
    st = path.stat()
    if st.st_mode & 0o077:
        path.chmod(0o700)
    return path


class UnsafeFolder(Exception):
    """A state folder another user owns or may write in. Exit code 2, like a user error (this module imports
    nothing of cloudddp: the CLI gives it its exit code)."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str) -> None:
        super().__init__(f"{message}\nhint: {hint}")


def refuse_unless_private(path: Path, what: str, *, fix: str | None = None) -> None:
    """A folder cloudddp keeps its state in (snapshots it unpacks and runs, status files whose pids it signals) must
    be this user's, and nobody else may have been able to write in it: else :class:`UnsafeFolder` (exit 2). The same
    holds for a file cloudddp takes settings from; ``fix`` is then the hint, in place of a folder's."""
    for checked in {path, path.resolve()}:
        st = checked.lstat()
        if st.st_uid != os.geteuid():
            raise UnsafeFolder(
                f"{what} {checked} belongs to another user (uid {st.st_uid}): what it holds could have been "
                "planted there, and cloudddp would run it as you",
                hint=fix or f"set {what} to a folder of your own (it is created 0700 when missing)",
            )
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022:
            raise UnsafeFolder(
                f"{what} {checked} is writable by others (mode {stat.S_IMODE(st.st_mode):o}): what it holds could "
                "have been planted there",
                hint=fix or f"if nobody else wrote in it: chmod 700 {checked}; or set {what} to a fresh folder",
            )


PACKAGE = Path(__file__).resolve().parent


def data_text(name: str) -> str:
    """A data file shipped in ``cloudddp/data/`` (the catalog's CSV tables), as text.

    Read from the package's folder rather than through ``importlib.resources``: every command reads the
    catalog, importing ``importlib.resources`` costs ~3 ms of each render, and cloudddp is always installed as
    files (pip unpacks wheels; it is never imported from a zip).
    """
    return (PACKAGE / "data" / name).read_text(encoding="utf-8")
