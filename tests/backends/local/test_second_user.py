"""What another user of this machine can reach of a local run: real torchrun processes, a real second Unix user."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudddp.api import Job, Run
from cloudddp.backends.procs import Process, boot_id, start_time
from cloudddp.backends.status import RunState
from tests.support import users
from tests.support.cli import FIXTURES
from tests.support.victim import Victim
from tests.support.waiting import wait_until

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
    return users.required("a second user on this machine")


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
        if any(b"torch.distributed.run" in part for part in cmdline) and any(
            run_dir.encode() in part for part in cmdline
        ):
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
    leaked = [line for line in ps.stdout.splitlines() if rdzv_id in line or ("--rdzv-id" in line and run_dir in line)]
    assert not leaked, leaked  # ... but not the id


def test_cancel_of_a_run_whose_recorded_pids_now_belong_to_another_process_signals_nothing() -> None:
    """The run's supervisor and agent have exited; their pids now name another process (a reboot, or the kernel
    handing the numbers out again) and status.json still says running, as after a supervisor killed with -9."""
    run = Job.load(TINY, ["code.args=[--epochs, 1]"]).submit("local")
    assert run.wait(timeout=120, poll=0.2).state is RunState.SUCCEEDED
    status_file = Path(run.status().details["run_dir"]) / "status.json"
    recorded = json.loads(status_file.read_text())
    assert recorded["supervisor"]["start"] > 0 and len(recorded["node_processes"]) == 1

    victim = Victim()
    try:
        assert start_time(victim.pid)
        status_file.write_text(
            json.dumps({**recorded, "state": "running", "supervisor_pid": victim.pid, "node_pgids": [victim.pid]})
        )
        status = run.status()
        # not "running": the recorded node is not that process any more, so the run is decided from what it recorded
        assert status.state is RunState.SUCCEEDED and "decided from what the nodes recorded" in status.message
        run.cancel()
        assert victim.signals() == ["SIGWINCH"]  # only our probe: neither SIGTERM nor SIGKILL reached it
    finally:
        victim.stop()


def test_pids_up_to_1_and_processes_we_may_not_signal_are_never_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    boot = boot_id()
    assert boot is not None
    for pid in (-1, 0, 1, True, "42"):
        assert Process.from_record(pid, {"start": 1, "boot": boot}) is None
    init = Process(1, start_time(1) or 0, boot)  # init's true start time: refused for its pid alone
    assert start_time(1) is not None
    assert not init.current() and not init.alive() and not init.signal(0) and not init.signal_group(0)
    me = Process.of(os.getpid())
    assert me is not None and me.alive() and me.signal(0)
    assert not Process(me.pid, me.start + 1, boot).signal(0)  # the same pid, started at another time
    assert not Process(me.pid, me.start, "another-boot").signal(0)

    def refused(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "kill", refused)  # another user's process: not ours, so not alive
    assert not me.alive()
