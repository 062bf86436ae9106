"""Walking a code folder into the files a snapshot holds, each with its stat stamp.

Nothing outside the folder gets in: ``..``, absolute paths and symlinks that point outside are refused;
neither do FIFOs or devices. What is left out is :mod:`cloudddp.code.ignore`'s to say.
"""

from __future__ import annotations

import functools
import operator
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from cloudddp.code.filestate import Stamp
from cloudddp.code.ignore import Rules, ignore_line, ignore_lines
from cloudddp.errors import UserError

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
        for entry in _listing(here):
            rel = rel_dir + entry.name
            try:
                is_dir = entry.is_dir()  # follows symlinks, as os.walk does
            except OSError:
                is_dir = False
            if is_dir:
                if not ignored(rel + "/"):
                    if entry.is_symlink():
                        _check_link(root, Path(entry.path), rel)
                    else:
                        pending.append((rel + "/", entry.path))
                continue
            if left(rel):
                if left_out is not None and ignored.looks_secret(rel):
                    left_out.append(rel)
                continue
            if entry.is_symlink():
                _check_link(root, Path(entry.path), rel)
            try:
                st = entry.stat()  # cached by the listing for a file; one lstat otherwise
            except FileNotFoundError:
                raise UserError(
                    f"{rel} in {root} is a broken symlink", hint="fix or delete the link, or add it to .cloudddpignore"
                ) from None
            if not stat.S_ISREG(st.st_mode):  # a FIFO would block the packer forever; a device, read endlessly
                raise UserError(
                    f"{rel} in {root} is a {_kind(st.st_mode)}, not a regular file: a code snapshot holds files only",
                    hint=f"delete it, or add the line {ignore_line(rel)} to .cloudddpignore",
                )
            found.append(_entry((rel, Stamp.of(st))))
            if len(found) > MAX_FILES:
                raise UserError(
                    f"{root} holds more than {MAX_FILES:,} files to package",
                    hint="leave data out of code.dir (use inputs:), or add ignore patterns",
                )
    found.sort(key=_REL)
    return found


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
