"""An attacker as a second Unix user who binds a set of ports before a job runs (on 127.0.0.1 and on every
interface, with ``SO_REUSEADDR`` and ``SO_REUSEPORT``) and accepts whatever connects there, as a proxy to a store of
its own would; it reports which ports it held and what each connection sent."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tests.support.squatter import TAKE
from tests.support.users import OtherUser

_CODE = (
    r"""
import json, signal, socket, sys, time
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
servers, bound, received = [], [], []
"""
    + TAKE
    + r"""
for port in map(int, sys.argv[1:]):
    take(port)
print("ready", flush=True)
while not stop:
    received += [[port, data] for port, data in take_in()]
    time.sleep(0.005)
print(json.dumps({"bound": bound, "received": received}), flush=True)
"""
)


@dataclass
class PortSquatter:
    """The attacker process, holding its ports as ``user`` until :meth:`report`."""

    process: subprocess.Popen[str]

    @classmethod
    def start(cls, user: OtherUser, ports: Iterable[int]) -> PortSquatter:
        """Returns once every port it could bind is bound and listening."""
        argv = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups"]
        argv += [sys.executable, "-I", "-S", "-c", _CODE, *map(str, ports)]
        env = {"PATH": "/usr/bin:/bin", "HOME": "/"}
        process = subprocess.Popen(argv, cwd="/", env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert process.stdout is not None and process.stdout.readline() == "ready\n", process.stderr
        return cls(process)

    def report(self) -> dict[str, Any]:
        """Stop it; what it bound ([host, port]) and received ([port, the bytes each connection sent])."""
        self.process.send_signal(signal.SIGTERM)
        out, err = self.process.communicate(timeout=30)
        assert self.process.returncode == 0, err
        result: dict[str, Any] = json.loads(out)
        return result
