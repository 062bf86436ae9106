"""Where this machine keeps cloudddp's state: ``$CLOUDDDP_HOME``, or ``~/.cloudddp``; and how a file or folder
cloudddp trusts is opened.

Every wing that keeps something between commands (the run database, snapshots, digests, measured step times,
recovery chains, local run folders) finds its folder under :func:`home`, so this is the one module they all
share and it imports nothing of cloudddp.

A trusted path (the state folder, the user configuration) is walked one folder at a time from ``/``, each opened
with ``O_NOFOLLOW`` and judged on its open descriptor (``fstat``): every folder on the way is the user's or root's
and nobody else may write in it (or it is sticky: others may add entries but not replace ours), a link is followed
by hand and its target walked the same way, so a link is judged where it points. Nobody else can then change what
the walk reaches between the check and the use.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

MAX_LINKS = 40
"""Links followed in one walk, as the kernel's own limit (``ELOOP``)."""

_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # NONBLOCK: opening a FIFO never hangs


def home() -> Path:
    """The state folder (its real path), created on first use, private to its owner (0700): it holds run folders,
    plans, logs and checkpoints. An existing one of ours that others could enter is closed too."""
    given = Path(os.environ.get("CLOUDDDP_HOME") or Path.home() / ".cloudddp")
    fd, real = open_trusted(given, "CLOUDDDP_HOME", folder=True, create=True)
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return real


class UnsafeFolder(Exception):
    """A state folder another user owns or may write in. Exit code 2, like a user error (this module imports
    nothing of cloudddp: the CLI gives it its exit code)."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str) -> None:
        super().__init__(f"{message}\nhint: {hint}")


def read_trusted(path: Path, what: str, *, limit: int, fix: str | None = None) -> bytes:
    """The bytes of a file cloudddp takes settings or state from (the user configuration, a run's status file whose
    pids it signals), read from the one descriptor that was judged (:func:`open_trusted`): at most ``limit + 1``, so
    a caller can tell a file too large. :class:`UnsafeFolder` when it could have been planted."""
    fd, _ = open_trusted(path, what, fix=fix)
    with os.fdopen(fd, "rb") as f:
        return f.read(limit + 1)


def open_trusted(
    path: Path, what: str, *, fix: str | None = None, folder: bool = False, create: bool = False
) -> tuple[int, Path]:
    """A descriptor of ``path`` (a regular file, or a folder when ``folder``) and its real path, reached by the walk of
    the module's docstring; the file or folder itself is the user's and nobody else may write in it. ``create`` makes
    missing folders (0700). :class:`UnsafeFolder` when something on the way could have been planted;
    :class:`OSError` as the system says it (:class:`FileNotFoundError`: ``path`` is not there)."""
    pending = [p for p in reversed(str(Path.cwd() / path).split("/")) if p not in ("", ".")]
    walked = [os.open("/", _OPEN | os.O_DIRECTORY)]
    names: list[str] = []
    links = 0
    try:
        _judge_folder(os.fstat(walked[0]), "/", what, fix)
        while pending:
            name = pending.pop()
            if name == "..":
                if names:
                    os.close(walked.pop())
                    names.pop()
                continue
            here = "/" + "/".join([*names, name])
            last = not pending
            st = _entry(walked[-1], name, create=create and (folder or not last))
            if stat.S_ISLNK(st.st_mode):
                links += 1
                target = _link_target(walked[-1], name, st, here, what, fix, links)
                if target.startswith("/"):
                    for fd in walked[1:]:
                        os.close(fd)
                    del walked[1:], names[:]
                pending += [p for p in reversed(target.split("/")) if p not in ("", ".")]
                continue
            if last and not folder and not stat.S_ISREG(st.st_mode):
                raise UnsafeFolder(f"{what} {here} is not a regular file", hint=fix or "give the path of a file")
            walked.append(os.open(name, _OPEN | (os.O_DIRECTORY if pending or folder else 0), dir_fd=walked[-1]))
            names.append(name)
            if pending:
                _judge_folder(os.fstat(walked[-1]), here, what, fix)
        real = Path("/" + "/".join(names))
        _judge_own(os.fstat(walked[-1]), real, what, fix)
        return walked.pop(), real
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise UnsafeFolder(
            f"{what} {path}: a link took the place of what was checked", hint=fix or "point it at a real path"
        ) from None
    finally:
        for fd in walked:
            os.close(fd)


def _entry(folder_fd: int, name: str, *, create: bool) -> os.stat_result:
    """``name`` in the folder, not followed if a link; a missing folder made (0700) when ``create``."""
    try:
        return os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        if not create:
            raise
        try:
            os.mkdir(name, 0o700, dir_fd=folder_fd)
        except FileExistsError:
            pass
        return os.stat(name, dir_fd=folder_fd, follow_symlinks=False)


def _link_target(
    folder_fd: int, name: str, st: os.stat_result, here: str, what: str, fix: str | None, links: int
) -> str:
    """Where a link points; refused when it is another user's (as the kernel refuses one in a sticky folder) or when
    links lead to links too often."""
    if links > MAX_LINKS:
        raise UnsafeFolder(f"{what}: more than {MAX_LINKS} links at {here}", hint=fix or "point it at a real path")
    if st.st_uid not in (os.geteuid(), 0):
        raise UnsafeFolder(
            f"{what}: the link {here} belongs to another user (uid {st.st_uid}): she chooses where it points",
            hint=fix or f"set {what} to a path of your own",
        )
    return os.readlink(name, dir_fd=folder_fd)


def _judge_folder(st: os.stat_result, here: str, what: str, fix: str | None) -> None:
    """A folder on the way: the user's or root's, and nobody else may replace what it holds."""
    if st.st_uid not in (os.geteuid(), 0):
        raise UnsafeFolder(
            f"{what}: the folder {here} on its path belongs to another user (uid {st.st_uid}): she could replace "
            "what it holds",
            hint=fix or f"set {what} to a path in folders of your own",
        )
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise UnsafeFolder(
            f"{what}: the folder {here} on its path is writable by others (mode {stat.S_IMODE(st.st_mode):o}): they "
            "could replace what it holds",
            hint=fix or f"chmod go-w {here}, or set {what} to a path in folders of your own",
        )


def _judge_own(st: os.stat_result, real: Path, what: str, fix: str | None) -> None:
    """The file or folder itself: the user's, and nobody else may write it."""
    if st.st_uid != os.geteuid():
        raise UnsafeFolder(
            f"{what} {real} belongs to another user (uid {st.st_uid}): what it holds could have been planted there, "
            "and cloudddp would run it as you",
            hint=fix or f"set {what} to a folder of your own (it is created 0700 when missing)",
        )
    if st.st_mode & 0o022:
        raise UnsafeFolder(
            f"{what} {real} is writable by others (mode {stat.S_IMODE(st.st_mode):o}): what it holds could "
            "have been planted there",
            hint=fix or f"if nobody else wrote in it: chmod 700 {real}; or set {what} to a fresh folder",
        )


PACKAGE = Path(__file__).resolve().parent


def data_text(name: str) -> str:
    """A data file shipped in ``cloudddp/data/`` (the catalog's CSV tables), as text.

    Read from the package's folder rather than through ``importlib.resources``: every command reads the
    catalog, importing ``importlib.resources`` costs ~3 ms of each render, and cloudddp is always installed as
    files (pip unpacks wheels; it is never imported from a zip).
    """
    return (PACKAGE / "data" / name).read_text(encoding="utf-8")
