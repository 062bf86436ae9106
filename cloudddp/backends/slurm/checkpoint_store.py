"""A Slurm training's checkpoint folder on the cluster's filesystem as a
:class:`~cloudddp.backends.checkpoints.store.CheckpointStore`: what a run moving to or from Slurm carries
(:mod:`cloudddp.backends.checkpoints.carry`).

Every command goes through the backend's :class:`~.shell.Shell`, here or on the login host over ssh, each path an
argument of its own (shell-quoted over ssh), never spliced into a script. A file streams both ways: a read is a
``cat`` whose output is consumed as it comes, a write feeds a ``cat`` on the cluster chunk by chunk into a hidden
temporary name beside the file (umask 077: 0600 files, 0700 folders), renamed into place by a second command only
once every byte was sent and the first succeeded, so a copy cut short (a lost connection) never sits under the
real name.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import secrets
import shlex
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from typing import IO

from cloudddp.backends.checkpoints.store import StoredFile, chunks, posix_name, unsafe
from cloudddp.backends.slurm.shell import Shell, SlurmCommandError, clean_env
from cloudddp.errors import CloudDDPError
from cloudddp.observe.console import printable, safe_name

_LIST = '[ -e "$1" ] || exit 0; find "$1" -type f -printf "%s\\t%P\\0"'
"""Every regular file under the folder (none when it does not exist), ``size<TAB>relative path`` NUL-ended."""
_INSIDE = (
    'want=$(realpath -e -- "$1") && { [ "$2" = . ] || want="$want/$2"; } && '
    'got=$(realpath -e -- "$1/$2") && [ "$got" = "$want" ] || '
    '{ echo "$2: a link, or not inside the checkpoint folder" >&2; exit 3; }; '
)
"""The shell's check, on the cluster, that ``$1/$2`` is reached through no link: its real path is the folder's real
path and ``$2`` (a trailing newline in a name makes them differ: refused too)."""
_THERE = '[ -e "$1/$2" ] || [ -L "$1/$2" ] || { echo "$2: no such file" >&2; exit 1; }; '
"""A file that is not there at all is said so (exit 1), not taken for a link."""
_READ = _THERE + _INSIDE + '[ -f "$got" ] || { echo "$2: not a regular file" >&2; exit 3; }; exec cat -- "$got"'
_HASH = _THERE + _INSIDE + '[ -f "$got" ] || { echo "$2: not a regular file" >&2; exit 3; }; exec sha256sum < "$got"'
_RECEIVE = 'umask 077 && mkdir -p -- "$1/$2" && ' + _INSIDE + 'cat > "$got/$3"'
HASH_SECONDS = 1800
"""How long ``sha256sum`` of one file may take (a checkpoint of tens of GB on a slow filesystem)."""


class SlurmCheckpoints:
    """The checkpoint folder ``folder`` on the cluster ``shell`` reaches."""

    def __init__(self, shell: Shell, folder: str) -> None:
        self.shell = shell
        self.folder = folder

    @property
    def location(self) -> str:
        return f"{self.shell.login_host}:{self.folder}" if self.shell.login_host else self.folder

    def files(self) -> list[StoredFile]:
        out = self.shell.run(["bash", "-c", _LIST, "cloudddp-list", self.folder], timeout=300).stdout
        found = []
        for entry in out.split(b"\0"):
            if entry:
                size, _, path = entry.decode(errors="surrogateescape").partition("\t")
                found.append(StoredFile(path, int(size)))
        return sorted(found, key=lambda f: f.path)

    @contextlib.contextmanager
    def reader(self, path: str) -> Iterator[IO[bytes]]:
        argv = ["bash", "-c", _READ, "cloudddp-read", self.folder, self._path(path)]
        self.shell.connect()
        with tempfile.TemporaryFile() as said:
            cat = subprocess.Popen(
                self.shell.argv(argv), stdout=subprocess.PIPE, stderr=said, env=clean_env(os.environ)
            )
            assert cat.stdout is not None
            try:
                yield cat.stdout
            except BaseException:
                cat.kill()
                raise
            finally:
                cat.stdout.close()
                code = cat.wait()
            self._check(argv, code, said)

    def takes(self, path: str) -> bool:
        return posix_name(path)

    def write(self, path: str, stream: IO[bytes]) -> None:
        head, name = posixpath.split(self._path(path))
        hidden = f".carry-{secrets.token_hex(8)}"  # short: a 255-byte name has no room for more
        temporary = posixpath.join(self.folder, head, hidden)
        try:
            self._send(["bash", "-c", _RECEIVE, "cloudddp-carry", self.folder, head or ".", hidden], stream)
            self.shell.run(["mv", "-fT", "--", temporary, posixpath.join(self.folder, head, name)])
        except BaseException:
            with contextlib.suppress(CloudDDPError):  # a lost connection: the error that lost it is the one to say
                self.shell.run(["rm", "-f", "--", temporary], check=False)
            raise

    def sha256(self, path: str) -> str:
        """Read from standard input, so ``sha256sum`` prints no name (it escapes one holding ``\\`` or a newline,
        with a ``\\`` before the hash)."""
        argv = ["bash", "-c", _HASH, "cloudddp-hash", self.folder, self._path(path)]
        return self.shell.text(argv, timeout=HASH_SECONDS).split()[0].lstrip("\\")

    def remove(self, path: str) -> None:
        self.shell.run(["rm", "-f", "--", posixpath.join(self.folder, self._path(path))])

    def _send(self, argv: Sequence[str], stream: IO[bytes]) -> None:
        """Run ``argv`` with ``stream`` on its standard input, a chunk at a time."""
        self.shell.connect()
        with tempfile.TemporaryFile() as said:
            cat = subprocess.Popen(
                self.shell.argv(argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=said,
                env=clean_env(os.environ),
            )
            assert cat.stdin is not None
            cut = False
            try:
                for block in chunks(stream):
                    cat.stdin.write(block)
                cat.stdin.close()
            except BrokenPipeError:
                cut = True  # it stopped reading: what it said tells why
                with contextlib.suppress(OSError):
                    cat.stdin.close()
            except BaseException:
                cat.kill()
                cat.wait()
                raise
            code = cat.wait()
            self._check(argv, code or (1 if cut else 0), said)

    def _check(self, argv: Sequence[str], code: int, said: IO[bytes]) -> None:
        if code == 0:
            return
        said.seek(0)
        text = said.read(4096).decode(errors="replace").strip() or "no message"
        shown = shlex.join(argv[3:] if argv[:2] == ["bash", "-c"] else argv)  # the script itself says nothing
        raise SlurmCommandError(printable(f"{shown} exited {code} {self.shell.where}: {text}"))

    def _path(self, path: str) -> str:
        """``path`` checked to be a name inside the folder (relative to it)."""
        if unsafe(path):
            raise CloudDDPError(f"{safe_name(path)} is not a file name inside the checkpoint folder {self.location}")
        return path
