"""Walking a code folder into the files a snapshot holds, each with its stat stamp.

Nothing outside the folder gets in: ``..``, absolute paths and symlinks that point outside are refused;
neither do FIFOs or devices. What is left out is :mod:`cloudddp.code.ignore`'s to say. A folder's plain regular
files, nearly all of what it holds, are listed and stamped in C where the extension ``_tarloop`` (``_tarloop.c``)
is built (the Python loop in :func:`_regular_files` is the reference, and does the same where it is not); every other
entry goes through :func:`_other`.
"""

from __future__ import annotations

import functools
import operator
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from cloudddp.code.filestate import Stamp
from cloudddp.code.ignore import Rules, ignore_line, ignore_lines
from cloudddp.errors import UserError

try:
    from cloudddp.code import _tarloop
except ImportError:  # installed without a C compiler: _regular_files lists every folder in Python
    _tarloop = None  # type: ignore[assignment]

MAX_FILES = 20_000
_NAME, _REL = operator.attrgetter("name"), operator.itemgetter(0)  # sort keys called in C, not a lambda per file


class Entry(NamedTuple):
    """A file to pack: its posix path relative to the folder, and its stamp when it was scanned. A named tuple, as
    :class:`~cloudddp.code.filestate.Stamp` is: a frozen dataclass costs every render ~1 ms to define."""

    rel: str
    stamp: Stamp


_entry = functools.partial(tuple.__new__, Entry)  # Entry((rel, stamp)) in C: a named tuple's __new__ is Python


def scan(root: Path, lines: Sequence[str], left_out: list[str] | None = None) -> list[Entry]:
    """The files to pack with their stamps, sorted; refuses anything that would escape ``root``. Files left
    out only because they look like credentials are added to ``left_out``.

    Symlinks inside the folder are followed for files; a symlinked folder is checked but not entered."""
    if not root.is_dir():
        raise UserError(f"{root} is not a folder")
    ignored = Rules(root, lines)
    found: list[Entry] = []
    pending = [("", str(root))]
    while pending:
        rel_dir, here = pending.pop()
        ignored.enter(rel_dir, here)
        left = ignored.matcher()  # ignored(), asked the quickest way until a nested .gitignore is added
        files, left_files, rest = _regular_files(here, rel_dir, left)
        found += files
        if left_out is not None:
            left_out += [rel for rel in left_files if ignored.looks_secret(rel)]
        for name in rest:
            found += _other(root, rel_dir, here, name, ignored, left, left_out, pending)
        if len(found) > MAX_FILES:
            raise UserError(
                f"{root} holds more than {MAX_FILES:,} files to package",
                hint="leave data out of code.dir (use inputs:), or add ignore patterns",
            )
    found.sort(key=_REL)
    return found


def _regular_files(here: str, rel_dir: str, left: Callable[[str], object]) -> tuple[list[Entry], list[str], list[str]]:
    """The folder's plain regular files (not symlinks) the rules keep, with their stamps; the paths of those
    they leave out; the names of its other entries, for :func:`_other`. In C where the extension is built."""
    if _tarloop is not None:
        try:
            return _tarloop.regular_files(here, rel_dir, left, Entry, Stamp)
        except OSError:
            pass  # unreadable: _listing says so in its words
    files, left_files, rest = [], [], []
    for entry in _listing(here):
        if not entry.is_file(follow_symlinks=False):  # the listing's type: no syscall
            rest.append(entry.name)
            continue
        rel = rel_dir + entry.name
        if left(rel):
            left_files.append(rel)
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:  # gone since it was listed: _other says what it is now
            rest.append(entry.name)
            continue
        if stat.S_ISREG(st.st_mode):
            files.append(_entry((rel, Stamp.of(st))))
        else:
            rest.append(entry.name)
    return files, left_files, rest


def _other(
    root: Path,
    rel_dir: str,
    here: str,
    name: str,
    ignored: Rules,
    left: Callable[[str], object],
    left_out: list[str] | None,
    pending: list[tuple[str, str]],
) -> list[Entry]:
    """A folder's entry that is not a plain regular file: a subfolder (added to ``pending``), a symlink, something
    that is neither; the file it holds, if any."""
    rel, path = rel_dir + name, os.path.join(here, name)
    if os.path.isdir(path):  # follows symlinks, as os.walk does
        if not ignored(rel + "/"):
            if os.path.islink(path):
                _check_link(root, Path(path), rel)
            else:
                pending.append((rel + "/", path))
        return []
    if left(rel):
        if left_out is not None and ignored.looks_secret(rel):
            left_out.append(rel)
        return []
    if os.path.islink(path):
        _check_link(root, Path(path), rel)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UserError(
            f"{rel} in {root} is a broken symlink", hint="fix or delete the link, or add it to .cloudddpignore"
        ) from None
    if not stat.S_ISREG(st.st_mode):  # a FIFO would block the packer forever; a device, read endlessly
        raise UserError(
            f"{rel} in {root} is a {_kind(st.st_mode)}, not a regular file: a code snapshot holds files only",
            hint=f"delete it, or add the line {ignore_line(rel)} to .cloudddpignore",
        )
    return [_entry((rel, Stamp.of(st)))]


def _listing(here: str) -> list[os.DirEntry[str]]:
    """The folder's entries in name order."""
    try:
        with os.scandir(here) as listing:
            return sorted(listing, key=_NAME)
    except OSError as e:
        raise UserError(
            f"cannot read {here}: {e.strerror}", hint="fix its permissions, or add it to .cloudddpignore"
        ) from None


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    kinds = [
        (stat.S_ISFIFO, "FIFO (named pipe)"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    ]
    return next((name for test, name in kinds if test(mode)), "special file")


def collect(root: Path, ignore: Sequence[str] = ()) -> list[str]:
    """Files to pack, relative to ``root``; refuses anything that would escape it."""
    root = root.resolve()
    return [e.rel for e in scan(root, ignore_lines(root, ignore))]


def _check_link(root: Path, path: Path, rel: str) -> None:
    target = path.resolve()
    if target != root and root not in target.parents:
        raise UserError(
            f"{rel} is a symlink to {target}, outside the code folder {root}",
            hint="copy the file into the folder, or add it to .cloudddpignore",
        )
