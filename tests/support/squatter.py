"""An attacker as a second Unix user: watches ``/proc`` for the processes of a test's local runs, takes every port
it sees in their argv (binding it on 127.0.0.1 and on every interface, with ``SO_REUSEADDR`` and ``SO_REUSEPORT``)
and accepts whatever connects there, as a proxy to a store of its own would; it reports what it saw, bound and was sent.

It races for a port while a process showing it runs (read from ``/proc``, then bound at once): a run's processes
hold its port until the last of them is gone, so a port the attacker binds was free while the run lived."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from tests.support.users import OtherUser

TAKE = r"""
def take(port):  # bind it on loopback and every interface, as far as the kernel lets another user
    for host in ("127.0.0.1", "0.0.0.0"):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            s.bind((host, port))
            s.listen(64)
        except OSError:
            s.close()
            continue
        s.setblocking(False)
        servers.append(s)
        bound.append([host, port])


def take_in():  # whatever reached the ports taken: (port, the first bytes sent, hex) per connection
    for s in servers:
        try:
            conn, _ = s.accept()
        except OSError:
            continue
        conn.settimeout(1)
        try:
            data = conn.recv(4096).hex()
        except OSError:
            data = ""
        yield s.getsockname()[1], data
"""
"""The attacker's binding of one port and reading of what reached it, shared by the attackers' code (``servers``
and ``bound`` are theirs)."""

_CODE = (
    r"""
import json, os, re, signal, socket, sys, time
marker = sys.argv[1].encode()
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
seen, bound, servers, received = set(), [], [], []
endpoint = re.compile(rb"127\.0\.0\.1:(\d+)")

def ports(cmdline):
    found = {int(p) for p in endpoint.findall(cmdline)}
    return found | {int(a) for a in cmdline.split(b"\0") if a.isdigit() and 1024 < int(a) < 65536}

"""
    + TAKE
    + r"""
while not stop:
    live = set()  # ports in the argv of a process that runs now: a port is taken only while its run lives
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = open(f"/proc/{entry}/cmdline", "rb").read()
            parent = open(f"/proc/{entry}/stat", "rb").read().rsplit(b")", 1)[1].split()[1].decode()
            ours = marker in cmdline or marker in open(f"/proc/{parent}/cmdline", "rb").read()
        except (OSError, IndexError):
            continue
        if ours and (b"cloudddp.backends.local" in cmdline or b"torch.distributed.run" in cmdline):
            live.update(ports(cmdline))
    seen.update(live)
    for port in live - {p for _, p in bound}:
        take(port)
    received += [data for _, data in take_in()]
    time.sleep(0.005)
print(json.dumps({"seen": sorted(seen), "bound": bound, "received": received}), flush=True)
"""
)


@dataclass
class Squatter:
    """The attacker process, running as ``user`` until :meth:`report`."""

    process: subprocess.Popen[str]

    @classmethod
    def start(cls, user: OtherUser, marker: str) -> Squatter:
        """``marker``: only processes whose argv, or whose parent's, holds it are attacked (the test's own home: the
        runs of other tests on this machine are left alone)."""
        argv = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups"]
        argv += [sys.executable, "-I", "-S", "-c", _CODE, marker]
        env = {"PATH": "/usr/bin:/bin", "HOME": "/"}
        process = subprocess.Popen(argv, cwd="/", env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return cls(process)

    def report(self) -> dict[str, Any]:
        """Stop it; what it saw (ports), bound ([host, port]) and received (the bytes each connection sent)."""
        self.process.send_signal(signal.SIGTERM)
        out, err = self.process.communicate(timeout=30)
        assert self.process.returncode == 0, err
        result: dict[str, Any] = json.loads(out)
        return result
