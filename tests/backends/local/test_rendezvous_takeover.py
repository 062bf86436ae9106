"""Nobody else can take a local run's rendezvous: a second Unix user racing for the store's port, one after every
listener of a restarting run, a store that fails to start, and a store whose run has no process left. Real torchrun
runs, a real second user."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.procs import Process
from cloudddp.backends.status import Cause, RunState
from tests.support import users
from tests.support.cli import FIXTURES
from tests.support.faults import processes_naming, rank_processes, wait_for_rank
from tests.support.prober import Prober, listeners, machine_address
from tests.support.squatter import Squatter
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow
TINY = FIXTURES / "tinyjob" / "job.yaml"


@pytest.mark.parametrize("shape", ["1x2", "2x2-restarted"])
def test_an_attacker_racing_for_the_store_port_never_gets_a_connection(shape: str, cloudddp_home: Path) -> None:
    squatter = Squatter.start(users.required("an attacker racing for the port"), str(cloudddp_home))
    overrides = ["code.args=[--epochs, 6, --sleep, 0.3]"]
    if shape == "2x2-restarted":
        overrides += ["local.nodes=2", "local.processes_per_node=2", "limits.max_restarts=1"]
    try:
        run = Job.load(TINY, overrides).submit("local")
        run_dir = run.status().details["run_dir"]
        if shape == "2x2-restarted":  # every agent joins the rendezvous again, through the same port
            os.kill(wait_for_rank(run_dir, 3, attempt=0, timeout=180), signal.SIGKILL)
            wait_until(lambda: any(n == 1 for _, n in rank_processes(run_dir).values()), timeout=180)
        status = run.wait(timeout=300, poll=0.5)
    finally:
        report = squatter.report()
    assert status.state is RunState.SUCCEEDED, status
    port = json.loads((Path(run_dir) / "plan.json").read_text())["request"]["rendezvous_port"]
    assert int(port) in report["seen"], report  # it learnt the port (from the agents' argv) and raced for it ...
    assert report["bound"] == [] and report["received"] == [], report  # ... and never held it or heard anything


def test_a_store_that_cannot_start_fails_the_run_as_infrastructure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch broken for the store (a stand-in package that fails to import): the run fails before any agent starts,
    with a cause recovery retries (not the job's error)."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('torch is broken here')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    run = Job.load(TINY, ["code.args=[--epochs, 1]"]).submit("local")
    status = run.wait(timeout=120, poll=0.2)
    assert status.state is RunState.FAILED and status.cause is Cause.INFRASTRUCTURE, status
    assert Cause.INFRASTRUCTURE.recoverable
    assert "rendezvous store did not start" in status.message
    run_dir = status.details["run_dir"]
    assert "torch is broken here" in (Path(run_dir) / "supervisor.log").read_text()
    assert not (Path(run_dir) / "status.json").read_text().count("node_pgids")  # no agent was started
    wait_until(lambda: not processes_naming(run_dir), timeout=30)


def test_the_store_ends_with_its_run_when_the_supervisor_was_killed_and_nobody_adopted_it() -> None:
    """``kill -9`` of the supervisor, and nothing looks at the run (no status, no logs: nothing adopts it): when
    its nodes end, the store ends too, and no process of the run is left."""
    run = Job.load(TINY, ["code.args=[--epochs, 4, --sleep, 0.3]"]).submit("local")
    run_dir = run.status().details["run_dir"]
    wait_for_rank(run_dir, 1, timeout=180)
    recorded = json.loads((Path(run_dir) / "status.json").read_text())
    supervisor = Process.from_record(recorded["supervisor_pid"], recorded["supervisor"])
    store = Process.from_record(recorded["store_pid"], recorded["store"])
    assert supervisor is not None and store is not None and store.alive()
    assert supervisor.signal(signal.SIGKILL)
    wait_until(lambda: not rank_processes(run_dir), timeout=180)  # the nodes train on and finish
    wait_until(lambda: not store.alive() and not processes_naming(run_dir), timeout=30)  # it checks every 2 s


@pytest.mark.parametrize("nodes", [1, 2])
def test_no_process_of_a_local_run_listens_beyond_loopback(nodes: int) -> None:
    """``ss -ltnp`` while the ranks train: the rendezvous store, torchrun's store for the workers and gloo's
    listeners are all on 127.0.0.1 (torchrun's own agent store listened on every interface)."""
    overrides = ["code.args=[--epochs, 200, --sleep, 0.1]", f"local.nodes={nodes}"]
    run = Job.load(TINY, overrides).submit("local")
    try:
        wait_until(lambda: any(True for _ in run.metrics()), timeout=180)
        pids = set(processes_naming(run.status().details["run_dir"]))
        listening = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines()
        ours = [line for line in listening if any(f"pid={pid}," in line for pid in pids)]
    finally:
        run.cancel()
    # the rendezvous store, the agents' worker store(s), one gloo listener per rank at least
    assert len(ours) >= 2 + nodes, listening
    local = [line.split()[3] for line in ours]
    assert all(address.startswith("127.0.0.1:") for address in local), ours


def test_a_restarting_run_completes_while_another_user_takes_free_ports_and_connects_to_every_listener(
    cloudddp_home: Path,
) -> None:
    """``limits.max_restarts: 2``, a rank killed once: the workers' store of each attempt, the rendezvous store and
    gloo's listeners are on 127.0.0.1 and bound by the run before their port is known. She holds free ports from the
    start, is told of every listener of the run as it appears, connects to it and tries to bind its port; nothing
    reaches her, nothing of the run answers her through the machine's address, and the run completes."""
    address = machine_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to try the listeners through")
    prober = Prober.start(users.required("an attacker after every listener"), address)
    seen: dict[int, str] = {}
    try:
        run = Job.load(TINY, ["code.args=[--epochs, 8, --sleep, 0.3]", "limits.max_restarts=2"]).submit("local")
        run_dir = run.status().details["run_dir"]

        def look() -> bool:
            found = listeners(set(processes_naming(run_dir)))
            seen.update(found)
            prober.tell(set(found))
            return run.status().state.terminal

        victim = wait_for_rank(run_dir, 1, attempt=0, timeout=180)
        wait_until(lambda: look() or len(seen) >= 4, timeout=180, poll=0.05)  # the first attempt's, all up
        first = len(seen)
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: look() or any(n == 1 for _, n in rank_processes(run_dir).values()), timeout=180)
        wait_until(look, timeout=300, poll=0.05)
        status = run.wait(timeout=60, poll=0.5)
    finally:
        report = prober.report()
    assert status.state is RunState.SUCCEEDED, status
    assert first >= 4 and len(seen) > first, seen  # the rendezvous store, a workers' store per attempt, gloo's
    assert all(local.startswith("127.0.0.1:") for local in seen.values()), seen
    external = {key: how for key, how in report["connected"].items() if key.startswith("external:")}
    assert external and set(external.values()) == {"ConnectionRefusedError"}, report
    assert "connected" in report["connected"].values(), report  # she did reach the listeners on loopback
    assert report["received"] == [], report  # nothing of the run ever connected to a port she held
