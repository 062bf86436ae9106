"""An attacker as a second Unix user who goes after every listener of a run she is told of: she connects to it
through this machine's own address and through 127.0.0.1 (and sends it a few bytes), tries again and again to bind its
port herself (on 127.0.0.1 and every interface, ``SO_REUSEADDR`` and ``SO_REUSEPORT``), and holds free ports the
kernel hands her from the start; she accepts whatever connects to a port she holds and reports it.

The test (root) finds the run's listeners with ``ss -ltnp`` (another user sees the sockets in ``/proc/net/tcp`` but
not whose they are) and writes each new port to her stdin: she does the rest as herself.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from tests.support.squatter import TAKE
from tests.support.users import OtherUser

FREE_PORTS = 64
"""How many free ports she grabs before the run starts (port 0: those the kernel would hand out next)."""

_CODE = (
    r"""
import fcntl, json, os, signal, socket, sys, time
address, grab = sys.argv[1], int(sys.argv[2])
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
servers, bound, received, tried, connected = [], [], [], set(), {}
"""
    + TAKE
    + r"""
for _ in range(grab):  # free ports, held on every interface from now on
    s = socket.socket(); s.bind(("0.0.0.0", 0)); s.listen(64); s.setblocking(False); servers.append(s)
fcntl.fcntl(0, fcntl.F_SETFL, os.O_NONBLOCK)
pending = b""
print("ready", flush=True)
while not stop:
    try:
        pending += os.read(0, 4096)
    except BlockingIOError:
        pass
    *lines, pending = pending.split(b"\n")
    tried.update(int(line) for line in lines if line.strip())
    for port in tried - {p for _, p in bound}:
        for label, host in (("external", address), ("loopback", "127.0.0.1")):
            key = f"{label}:{port}"
            if key in connected and connected[key] == "connected":
                continue
            try:
                c = socket.create_connection((host, port), timeout=1)
                c.sendall(b"\x00\x01 not a store message\n")
                c.close()
                connected[key] = "connected"
            except OSError as e:
                connected.setdefault(key, type(e).__name__)
        take(port)
    received += [[port, data] for port, data in take_in()]
    time.sleep(0.005)
print(json.dumps({"connected": connected, "bound": bound, "received": received}), flush=True)
"""
)


def machine_address() -> str | None:
    """This machine's own first non-loopback IPv4 address."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True)
    for line in out.stdout.splitlines():
        return line.split()[3].split("/")[0]
    return None


@dataclass
class Prober:
    """The attacker process, running as ``user`` until :meth:`report`."""

    process: subprocess.Popen[str]
    told: set[int] = field(default_factory=set)

    @classmethod
    def start(cls, user: OtherUser, address: str) -> Prober:
        argv = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups"]
        argv += [sys.executable, "-I", "-S", "-c", _CODE, address, str(FREE_PORTS)]
        env = {"PATH": "/usr/bin:/bin", "HOME": "/"}
        process = subprocess.Popen(
            argv, cwd="/", env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert process.stdout is not None and process.stdout.readline().strip() == "ready", process.stderr
        return cls(process)

    def tell(self, ports: set[int]) -> None:
        """Ports she has not been told of yet, to attack."""
        assert self.process.stdin is not None
        for port in sorted(ports - self.told):
            self.process.stdin.write(f"{port}\n")
        self.process.stdin.flush()
        self.told |= ports

    def report(self) -> dict[str, Any]:
        """Stop her; how each connection went (``external:PORT`` / ``loopback:PORT``), what she bound of the ports
        she was told of ([host, port]) and what connected to her sent ([port, hex])."""
        self.process.send_signal(signal.SIGTERM)
        out, err = self.process.communicate(timeout=30)
        assert self.process.returncode == 0, err
        result: dict[str, Any] = json.loads(out)
        return result


def listeners(pids: set[int]) -> dict[int, str]:
    """port -> local address of every TCP socket listening in one of ``pids`` (``ss -ltnp``, as root)."""
    rows = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines()
    found = {}
    for row in rows:
        if any(f"pid={pid}," in row for pid in pids):
            local = row.split()[3]
            found[int(local.rsplit(":", 1)[1])] = local
    return found
