"""``python -m cloudddp.backends.local.store_server --fd FD RUN_DIR``: serve a local run's rendezvous store on the
listening socket the supervisor hands down (:mod:`~cloudddp.backends.local.rendezvous`) while the run lives.

The store ends with its run, whatever ends the run: on SIGTERM (the supervisor that finishes the run sends it), when
the run's folder is gone or records an end, or when no process of the run is left (neither the supervisor that
started it nor any node; a supervisor that adopts the run does so while a node lives). It prints
:data:`~cloudddp.backends.local.rendezvous.READY` on stdout (a pipe to the supervisor) once it has verified that the
port reaches it. ``--port PORT`` (the plan's hand-run script) binds 127.0.0.1:PORT itself and serves until SIGTERM.

A module of its own (not ``rendezvous``, which the package imports), so ``-m`` runs it without a second copy.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from cloudddp.backends.local import recorded_nodes
from cloudddp.backends.local.rendezvous import READY, host_store, listening_socket, verified
from cloudddp.backends.local.rundir import RunDir
from cloudddp.backends.procs import Process

LIVENESS_SECONDS = 2.0
_STOP = {signal.SIGTERM, signal.SIGINT}


def run_goes_on(run_dir: Path, parent: Process | None) -> bool:
    """Whether the run still needs its store: its folder is there, it has not ended, and its supervisor (the one
    that started this store) or one of its nodes lives."""
    run = RunDir(run_dir)
    if not run.status_file.exists():
        return False
    status = run.read_status()
    if status.run_state.terminal:
        return False
    if parent is not None and parent.alive():
        return True
    return any([node.running() for node in recorded_nodes(run, status)])


def main(argv: list[str]) -> int:
    if argv[:1] == ["--port"]:  # by hand: bind it here
        store = host_store(listening_socket(int(argv[1])).detach())
        print(f"rendezvous store on 127.0.0.1:{store.port}", flush=True)
        signal.sigwait(_STOP)
        return 0
    fd, run_dir = int(argv[1]), Path(argv[2])
    parent = Process.of(os.getppid())
    store = host_store(fd)
    if not verified(store):
        print("the rendezvous store did not answer through its own port", file=sys.stderr, flush=True)
        return 1
    print(f"{READY} {store.port}", flush=True)
    sys.stdout.close()  # the supervisor reads one line: nothing more goes to its pipe
    while signal.sigtimedwait(_STOP, LIVENESS_SECONDS) is None:
        if not run_goes_on(run_dir, parent):
            print("the run has ended (or has no process left): the rendezvous store stops", file=sys.stderr)
            return 0
    return 0


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOP)
    sys.exit(main(sys.argv[1:]))
