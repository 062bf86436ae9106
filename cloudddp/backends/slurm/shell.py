"""Where Slurm's commands run: on this machine, or on a login host through ``ssh`` — the same argv either way.

Every command is built as an argv list. Here it runs as it is; with a login host it becomes
``ssh -o BatchMode=yes [options] HOST -- <argv, shell-quoted>``, which the remote login shell splits back
into the same argv. Files on the cluster (the run folder, logs) are written and read through commands too
(``cat``, ``tail``, ``tar``), so the backend has one code path whether or not this machine shares the
cluster's filesystem. Values that must not appear in an argv (secrets) travel on stdin.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from cloudddp.errors import BackendUnavailable, CloudDDPError

READ_CAP = 1 << 20
"""The most bytes one poll reads from one file (the rest comes with the next poll)."""

# Reads files from given offsets: for each (path, offset) pair prints the byte count, a newline and the bytes
# (-1 for a file that does not exist yet). One process per poll, however many files.
_READ = f"""
while [ "$#" -ge 2 ]; do
  f=$1; off=$2; shift 2
  if [ -f "$f" ]; then
    n=$(( $(wc -c < "$f") - off )); [ "$n" -gt {READ_CAP} ] && n={READ_CAP}; [ "$n" -lt 0 ] && n=0
    printf '%s\\n' "$n"; [ "$n" -gt 0 ] && tail -c +"$((off + 1))" "$f" | head -c "$n"
  else
    printf -- '-1\\n'
  fi
done
exit 0
"""
# Writes stdin to a file atomically (a temporary file next to it, then a rename).
_WRITE = 'mkdir -p "$(dirname "$1")" && cat > "$1.tmp.$$" && mv -f "$1.tmp.$$" "$1"'
# Runs "$@" with NAME=value pairs from stdin (NUL-separated) exported: secrets reach sbatch's environment
# without appearing in any argv or file.
_WITH_ENV = 'while IFS= read -r -d "" kv; do export "$kv"; done; exec "$@"'


class SlurmCommandError(CloudDDPError):
    """A Slurm command (or ssh) failed; the message holds the command and what it said."""


@dataclass(frozen=True)
class Shell:
    login_host: str | None = None
    ssh_options: tuple[str, ...] = ()

    @classmethod
    def of(cls, target: Mapping[str, Any]) -> Shell:
        """The shell a plan's target (or a run's registry record) names."""
        return cls(target.get("login_host"), tuple(target.get("ssh_options") or ()))

    def to_dict(self) -> dict[str, Any]:
        return {"login_host": self.login_host, "ssh_options": list(self.ssh_options)}

    @property
    def where(self) -> str:
        return f"on {self.login_host} (ssh)" if self.login_host else "on this machine"

    def argv(self, argv: Sequence[str]) -> list[str]:
        """What is executed here for ``argv`` (itself, or ssh carrying it)."""
        if self.login_host is None:
            return list(argv)
        return ["ssh", "-o", "BatchMode=yes", *self.ssh_options, self.login_host, "--", shlex.join(argv)]

    def run(
        self, argv: Sequence[str], *, stdin: bytes | IO[bytes] = b"", timeout: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``argv`` here or on the login host (``stdin``: bytes, or a file streamed to it); with ``check``,
        a non-zero exit is a :class:`SlurmCommandError`."""
        feed: dict[str, Any] = {"input": stdin} if isinstance(stdin, bytes) else {"stdin": stdin}
        try:
            done = subprocess.run(self.argv(argv), capture_output=True, timeout=timeout, check=False, **feed)
        except FileNotFoundError:
            tool = "ssh" if self.login_host else argv[0]
            raise BackendUnavailable(
                f"{tool} is not installed on this machine (needed to reach Slurm {self.where})",
                hint="run cloudddp on the cluster's login node, or set slurm.login_host to submit through ssh",
            ) from None
        except subprocess.TimeoutExpired:
            raise SlurmCommandError(f"{shlex.join(argv)} did not answer within {timeout:.0f} s {self.where}") from None
        if self.login_host and done.returncode == 255:
            raise BackendUnavailable(
                f"ssh to {self.login_host} failed: {_text(done.stderr)}",
                hint="check that `ssh -o BatchMode=yes <login_host> true` works (keys, agent)",
            )
        if check and done.returncode != 0:
            said = _text(done.stderr) or _text(done.stdout)
            if done.returncode == 127 and not said.strip():
                said = "command not found"
            raise SlurmCommandError(f"{shlex.join(argv)} exited {done.returncode} {self.where}: {said}")
        return done

    def text(self, argv: Sequence[str], **kwargs: Any) -> str:
        """The standard output of ``argv``, decoded."""
        return _text(self.run(argv, **kwargs).stdout)

    def run_with_env(self, argv: Sequence[str], env: Mapping[str, str], **kwargs: Any) -> str:
        """``argv`` with ``env`` exported in its environment, the values sent on stdin."""
        payload = b"".join(f"{name}={value}".encode() + b"\0" for name, value in env.items())
        return self.text(["bash", "-c", _WITH_ENV, "cloudddp-env", *argv], stdin=payload, **kwargs)

    # -- files on the cluster -----------------------------------------------------------------------
    def write(self, path: str, data: bytes | IO[bytes]) -> None:
        self.run(["bash", "-c", _WRITE, "cloudddp-write", path], stdin=data, timeout=600)

    def read_from(self, offsets: Sequence[tuple[str, int]]) -> list[bytes | None]:
        """What each file holds past its offset (at most :data:`READ_CAP` bytes), None for a missing file."""
        args = [str(x) for pair in offsets for x in pair]
        out = self.run(["bash", "-c", _READ, "cloudddp-read", *args]).stdout
        found: list[bytes | None] = []
        at = 0
        for _ in offsets:
            end = out.index(b"\n", at)
            size = int(out[at:end])
            at = end + 1
            if size < 0:
                found.append(None)
                continue
            found.append(out[at : at + size])
            at += size
        return found

    def tail(self, path: str, size: int = 16384) -> str:
        """The last ``size`` bytes of a file ('' when it does not exist)."""
        done = self.run(["tail", "-c", str(size), path], check=False)
        return _text(done.stdout) if done.returncode == 0 else ""


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace").strip()
