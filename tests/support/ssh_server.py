"""A real OpenSSH server on 127.0.0.1, standing in for a cluster's login node.

Its own host key, client key, authorized_keys and config in one temporary folder; ``sshd -D`` runs as a
child of the test process on a free port and is stopped by pid (and by the test process's watchdog,
``watchdog.py``, should that process die first). Sessions get the environment a login node's
shell would have (``SetEnv``: SLURM_CONF of the test cluster). Nothing reads or changes ``/etc/ssh`` or
``~/.ssh`` (sshd only needs its privilege-separation folder, ``/run/sshd``, to exist).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support import watchdog
from tests.support.ports import free_port


class SshUnavailable(RuntimeError):
    """sshd cannot run here; the message says why (tests skip with it)."""


@dataclass(frozen=True)
class SshServer:
    host: str
    """``user@127.0.0.1``, as slurm.login_host."""
    options: tuple[str, ...]
    """ssh arguments that reach it with the test's key (as slurm.ssh_options)."""


@contextmanager
def ssh_server(root: Path, env: Mapping[str, str]) -> Iterator[SshServer]:
    """sshd on a free port whose sessions get ``env``; raises SshUnavailable when it cannot start."""
    sshd, keygen = shutil.which("sshd", path="/usr/sbin:/usr/bin"), shutil.which("ssh-keygen")
    if sshd is None or keygen is None or shutil.which("ssh") is None:
        raise SshUnavailable("OpenSSH is not installed (sshd, ssh): `make system-deps` installs openssh-server")
    if os.geteuid() != 0:
        raise SshUnavailable("sshd must run as root to open sessions (this test run is not root)")
    root.mkdir(parents=True, exist_ok=True)
    for name in ("host", "client"):
        subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(root / name)], check=True, timeout=30)
    (root / "authorized_keys").write_bytes((root / "client.pub").read_bytes())
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    port = free_port()
    set_env = " ".join(f'"{k}={v}"' for k, v in env.items())
    (root / "sshd_config").write_text(f"""Port {port}
ListenAddress 127.0.0.1
HostKey {root}/host
PidFile {root}/sshd.pid
AuthorizedKeysFile {root}/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
SetEnv {set_env}
""")
    log = open(root / "sshd.log", "wb")  # noqa: SIM115 - the daemon keeps it
    proc = subprocess.Popen(
        [sshd, "-D", "-e", "-f", str(root / "sshd_config")],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    watchdog.guard(proc.pid)
    server = SshServer(
        f"{pwd.getpwuid(os.geteuid()).pw_name}@127.0.0.1",
        (
            "-p",
            str(port),
            "-i",
            str(root / "client"),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
        ),
    )
    try:
        deadline = time.monotonic() + 15
        while (
            subprocess.run(
                ["ssh", "-o", "BatchMode=yes", *server.options, server.host, "true"], capture_output=True, timeout=15
            ).returncode
            != 0
        ):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SshUnavailable(f"sshd did not start: {(root / 'sshd.log').read_text(errors='replace')[-500:]}")
            time.sleep(0.1)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        watchdog.release(proc.pid)
        log.close()
