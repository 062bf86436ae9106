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

from cloudddp.backends.checkpoints.store import StoredFile, chunks, unsafe
from cloudddp.backends.slurm.shell import Shell, SlurmCommandError, clean_env
from cloudddp.errors import CloudDDPError

_LIST = '[ -e "$1" ] || exit 0; find "$1" -type f -printf "%s\\t%P\\0"'
"""Every regular file under the folder (none when it does not exist), ``size<TAB>relative path`` NUL-ended."""
_RECEIVE = 'umask 077 && mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
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
        argv = ["cat", "--", self._path(path)]
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

    def write(self, path: str, stream: IO[bytes]) -> None:
        final = self._path(path)
        head, name = posixpath.split(final)
        temporary = posixpath.join(head, f".{name}.{secrets.token_hex(4)}.carry")
        try:
            self._send(["bash", "-c", _RECEIVE, "cloudddp-carry", temporary], stream)
            self.shell.run(["mv", "-f", "--", temporary, final])
        except BaseException:
            with contextlib.suppress(CloudDDPError):  # a lost connection: the error that lost it is the one to say
                self.shell.run(["rm", "-f", "--", temporary], check=False)
            raise

    def sha256(self, path: str) -> str:
        return self.shell.text(["sha256sum", "--", self._path(path)], timeout=HASH_SECONDS).split()[0]

    def remove(self, path: str) -> None:
        self.shell.run(["rm", "-f", "--", self._path(path)])

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
        raise SlurmCommandError(f"{shlex.join(argv)} exited {code} {self.shell.where}: {text}")

    def _path(self, path: str) -> str:
        if unsafe(path):
            raise CloudDDPError(f"{path!r} is not a file name inside the checkpoint folder {self.location}")
        return posixpath.join(self.folder, path)
