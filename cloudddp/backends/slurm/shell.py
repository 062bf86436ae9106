"""Where Slurm's commands run: on this machine, or on a login host through ``ssh`` — the same argv either way.

Every command is built as an argv list. Here it runs as it is; with a login host it becomes
``ssh -o BatchMode=yes [options] HOST -- <argv, shell-quoted>``, which the remote login shell splits back
into the same argv. Files on the cluster (the run folder, logs) are written and read through commands too
(``cat``, ``tail``, ``tar``), so the backend has one code path whether or not this machine shares the
cluster's filesystem. Values that must not appear in an argv (secrets) travel on stdin.

Two things keep the controller and the login node unburdened and the commands' answers the same wherever
cloudddp runs:

- **A clean environment.** A shell inside an allocation (Jupyter on Open OnDemand, ``srun --pty``) carries
  that job's ``SLURM_*``, and sbatch, srun and salloc read ``SBATCH_*``/``SRUN_*``/``SALLOC_*`` as options:
  passed on, ``SLURM_MEM_PER_CPU`` makes the new job's srun fatal. Every command runs without them (only
  ``SLURM_CONF``, which says which cluster, is kept), here and, for sbatch, on the login host too.
- **One ssh connection.** Through a login host, the first command starts a master connection
  (``ControlMaster``, ``ControlPersist`` 60 s) whose socket is in a folder only this user may enter; every
  later command, from this process or the next, reuses it instead of logging in again. ``slurm.ssh_options``
  come first, so ``[-o, ControlMaster=no]`` there turns it off. Where the user's ssh config names a
  ControlPath for the host (a login node with MFA: a master opened once by hand), cloudddp uses theirs and
  starts or stops none of its own.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shlex
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from cloudddp.backends.slurm.request import SlurmTarget
from cloudddp.errors import BackendUnavailable, CloudDDPError
from cloudddp.observe.console import printable

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
OUTER_JOB = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")
"""Prefixes of the variables an allocation's shell carries (its job's, and options for sbatch/srun/salloc)."""
KEPT = ("SLURM_CONF",)
"""... of which these are kept: which cluster the commands talk to."""
# Runs "$@" with NAME=value pairs from stdin (NUL-separated) exported, after removing an outer job's variables:
# secrets reach sbatch's environment without appearing in any argv or file, and nothing else does.
_WITH_ENV = (
    'for v in ${!SLURM_*} ${!SBATCH_*} ${!SRUN_*} ${!SALLOC_*}; do [ "$v" = SLURM_CONF ] || unset "$v"; done; '
    'while IFS= read -r -d "" kv; do export "$kv"; done; exec "$@"'
)
CONTROL_PERSIST = 60
"""Seconds an idle ssh master connection stays up for the next command."""


def on_cluster(cluster: str | None) -> list[str]:
    """``-M CLUSTER`` for a command about a job of another cluster than the login node's own (nothing otherwise):
    without it squeue, scontrol, sacct and scancel ask the login node's cluster, which does not know the job."""
    return ["-M", cluster] if cluster else []


def clean_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without an outer Slurm job's variables (:data:`OUTER_JOB`, but :data:`KEPT`)."""
    return {k: v for k, v in environ.items() if k in KEPT or not k.startswith(OUTER_JOB)}


class SlurmCommandError(CloudDDPError):
    """A Slurm command (or ssh) failed; the message holds the command and what it said."""


@dataclass(frozen=True)
class Shell:
    login_host: str | None = None
    ssh_options: tuple[str, ...] = ()

    @classmethod
    def of(cls, target: SlurmTarget) -> Shell:
        """The shell a plan's target names."""
        return cls(target.login_host, target.ssh_options)

    @property
    def where(self) -> str:
        return f"on {self.login_host} (ssh)" if self.login_host else "on this machine"

    def argv(self, argv: Sequence[str]) -> list[str]:
        """What is executed here for ``argv`` (itself, or ssh carrying it over the shared connection)."""
        if self.login_host is None:
            return list(argv)
        return [*self._ssh("no"), self.login_host, "--", shlex.join(argv)]

    def _ssh(self, master: str) -> list[str]:
        """ssh with the user's options first (ssh takes the first value of each), then the shared connection
        unless the user's own config (or options) names a ControlPath: their master connection, opened once
        with a login node's MFA, is then the one used."""
        shared = (
            [] if self.users_master else ["-o", f"ControlMaster={master}", "-o", f"ControlPath={self.control_path}"]
        )
        return ["ssh", "-o", "BatchMode=yes", *self.ssh_options, *shared]

    @functools.cached_property
    def users_master(self) -> bool:
        """Whether ssh's own configuration for the login host sets a ControlPath (``ssh -G``, which reads
        ``~/.ssh/config`` and the options without connecting)."""
        if self.login_host is None:
            return False
        shown = subprocess.run(
            ["ssh", "-G", *self.ssh_options, self.login_host], capture_output=True, timeout=30, check=False
        )
        config = shown.stdout.decode(errors="replace").splitlines()
        return any(line.lower().startswith("controlpath ") and line.split()[1:] != ["none"] for line in config)

    @property
    def control_path(self) -> str:
        """The master connection's socket: ``%C`` is ssh's hash of host, port and user (short, as a socket's
        path must be), in a folder only this user may enter."""
        return str(_control_folder() / "ssh-%C")

    def connect(self) -> None:
        """Start the master connection if none is up (``ssh -f -N``: it goes to the background once logged in,
        holding none of this process's pipes). Nothing to do here, or when it cannot start: each command then
        logs in on its own, and says why if that fails too."""
        if self.login_host is None or self.users_master or self.connected():
            return
        with_persist = [*self._ssh("auto"), "-o", f"ControlPersist={CONTROL_PERSIST}", "-f", "-N", self.login_host]
        subprocess.run(
            with_persist,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
            check=False,
            env=clean_env(os.environ),
        )

    def connected(self) -> bool:
        """Whether a master connection to the login host is up (``ssh -O check``)."""
        if self.login_host is None:
            return False
        up = subprocess.run(
            [*self._ssh("no"), "-O", "check", self.login_host], capture_output=True, timeout=30, check=False
        )
        return up.returncode == 0

    def close(self) -> None:
        """Stop cloudddp's master connection now (``ssh -O exit``) rather than ControlPersist seconds after last
        use; the user's own is theirs to keep."""
        if self.login_host is not None and not self.users_master:
            subprocess.run(
                [*self._ssh("no"), "-O", "exit", self.login_host], capture_output=True, timeout=30, check=False
            )

    def run(
        self, argv: Sequence[str], *, stdin: bytes | IO[bytes] = b"", timeout: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``argv`` here or on the login host (``stdin``: bytes, or a file streamed to it); with ``check``,
        a non-zero exit is a :class:`SlurmCommandError`."""
        feed: dict[str, Any] = {"input": stdin} if isinstance(stdin, bytes) else {"stdin": stdin}
        try:
            self.connect()
            done = subprocess.run(
                self.argv(argv), capture_output=True, timeout=timeout, check=False, env=clean_env(os.environ), **feed
            )
        except FileNotFoundError:
            tool = "ssh" if self.login_host else argv[0]
            raise BackendUnavailable(
                f"{tool} is not installed on this machine (needed to reach Slurm {self.where})",
                hint="run cloudddp on the cluster's login node, or set slurm.login_host to submit through ssh",
            ) from None
        except subprocess.TimeoutExpired:
            raise SlurmCommandError(
                printable(f"{shlex.join(argv)} did not answer within {timeout:.0f} s {self.where}")
            ) from None
        if self.login_host and done.returncode == 255:
            raise BackendUnavailable(
                f"ssh to {self.login_host} failed: {_text(done.stderr)}",
                hint="check that `ssh -o BatchMode=yes <login_host> true` works (keys, agent)",
            )
        if check and done.returncode != 0:
            said = _text(done.stderr) or _text(done.stdout)
            if done.returncode == 127 and not said.strip():
                said = "command not found"
            raise SlurmCommandError(printable(f"{shlex.join(argv)} exited {done.returncode} {self.where}: {said}"))
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


@functools.cache
def _control_folder() -> Path:
    """``<tmp>/cloudddp-ssh-<uid>``, created 0700 and used only while it is a real folder of this user's that
    nobody else may enter (a socket there is a logged-in connection); otherwise a fresh private folder for
    this process."""
    folder = Path(tempfile.gettempdir()) / f"cloudddp-ssh-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    st = os.lstat(folder)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077:
        return folder
    fresh = Path(tempfile.mkdtemp(prefix="cloudddp-ssh-"))
    atexit.register(shutil.rmtree, fresh, ignore_errors=True)  # this process's alone: not left behind
    return fresh


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace").strip()
