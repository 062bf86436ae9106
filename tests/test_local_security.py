"""What another user of this machine can reach of a local run: real torchrun processes, a real second Unix user."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudddp.api import Job, Run

from .support import users
from .support.cli import FIXTURES
from .support.waiting import wait_until

pytestmark = pytest.mark.slow
TINY = FIXTURES / "tinyjob" / "job.yaml"

_PROBE = """
import json, socket, sys
result = {}
for label, host in (("external", sys.argv[1]), ("loopback", "127.0.0.1")):
    try:
        socket.create_connection((host, int(sys.argv[2])), timeout=5).close()
        result[label] = "connected"
    except OSError as e:
        result[label] = type(e).__name__
print(json.dumps(result))
"""


def machine_address() -> str | None:
    """This machine's own first non-loopback IPv4 address."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True)
    for line in out.stdout.splitlines():
        return line.split()[3].split("/")[0]
    return None


@pytest.fixture
def other() -> users.OtherUser:
    reason = users.unavailable()
    if reason:
        pytest.skip(reason)
    return users.other_user()


@pytest.fixture
def running() -> Iterator[Run]:
    """A two-process run that trains long enough to be looked at, cancelled afterwards."""
    run = Job.load(TINY, ["code.args=[--epochs, '300', --sleep, '0.05']"]).submit("local")
    try:
        wait_until(lambda: any(True for _ in run.metrics()), timeout=120)  # rendezvous done, ranks training
        yield run
    finally:
        run.cancel()


def _agents(run_dir: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"torch.distributed.run" in cmdline and any(run_dir.encode() in part for part in cmdline):
            found.append(int(entry.name))
    return found


def test_another_user_cannot_reach_the_rendezvous_store_and_ps_shows_no_rdzv_id(
    other: users.OtherUser, running: Run
) -> None:
    address = machine_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to try the store through")
    run_dir = running.status().details["run_dir"]
    port = json.loads((Path(run_dir) / "plan.json").read_text())["request"]["rendezvous_port"]

    probe = other.python(_PROBE, address, str(port))
    assert probe.returncode == 0, probe.stderr
    # refused through the machine's address; reachable on loopback (so the store is up and the probe works)
    assert json.loads(probe.stdout) == {"external": "ConnectionRefusedError", "loopback": "connected"}

    agents = _agents(run_dir)
    assert agents, "no torchrun agent of the run found"
    ids = set()
    for pid in agents:
        environ = dict(
            item.split(b"=", 1) for item in (Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")) if b"=" in item
        )
        ids.add(environ[b"PET_RDZV_ID"].decode())
    (rdzv_id,) = ids  # every agent joins the same rendezvous
    assert len(rdzv_id) == 32 and int(rdzv_id, 16) >= 0 and rdzv_id != "tiny"
    ps = other.run(["ps", "-eww", "-o", "args"])
    assert ps.returncode == 0 and "torch.distributed.run" in ps.stdout  # the other user sees the agents ...
    assert rdzv_id not in ps.stdout and "--rdzv-id" not in ps.stdout  # ... but not the id
