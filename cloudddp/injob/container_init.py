"""cloudddp's init on SageMaker: the container's PID 1, which passes a stop to torchrun's agent or the ranks only.

Shipped inside every code snapshot as ``_cloudddp_init.py`` and started as the container's entry
(``ContainerEntrypoint``; see :mod:`cloudddp.backends.sagemaker.request`)::

    python _cloudddp_init.py COMMAND...

It runs COMMAND (the image's own entry) as its child and reaps every orphan. An image without that entry (a
program COMMAND names is not on ``PATH``: not a DLC) gets cloudddp's own start instead, ``_cloudddp_start.py``
(:mod:`cloudddp.injob.container_start`), taken out of the code channel's archive. The PyTorch images' own PID 1
(``bash -m start_with_right_hostname.sh``) forwards no signal, so without this a StopTrainingJob, a spot
interruption or MaxRuntime would SIGKILL the script after the grace without its final checkpoint. The stop goes
where a normal launch sends it, once: to torchrun's agent, which passes it to each rank, or under Open MPI to each
rank itself (:func:`stop_targets`); the rank launcher (``_cloudddp_launch.py``, :mod:`cloudddp.injob.shim`) passes it
to its program. Signalling every process instead (as this file once did) kills DataLoader workers, which die on a
signal from anyone but their parent and crash the program before it saves, and reaches each program up to three
times.

It needs nothing but Python's standard library: it runs in stock images where cloudddp is not installed.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Callable

SHIPPED_AS = "_cloudddp_init.py"
START_AS = "_cloudddp_start.py"
"""cloudddp's own start (:mod:`cloudddp.injob.container_start`), for an image without the DLC's entry."""
RANK_LAUNCHER = "_cloudddp_launch.py"
"""The rank launcher's name in the snapshot (:data:`cloudddp.injob.shim.SHIPPED_AS`): a rank is a process of it."""


def _processes() -> dict[int, tuple[int, str, list[str]]]:
    """Every process: pid -> (parent, command name, argv), from /proc."""
    found: dict[int, tuple[int, str, list[str]]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    line = f.read().decode(errors="replace").split("\0")
                name = stat[stat.index("(") + 1 : stat.rindex(")")]
                found[int(entry)] = (int(stat.rsplit(")", 1)[1].split()[1]), name, line)
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
    return found


def _environment(pid: int) -> set[str]:
    """The names of the variables process ``pid`` started with (empty when unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return {item.split(b"=", 1)[0].decode(errors="replace") for item in f.read().split(b"\0") if item}
    except OSError:
        return set()


SHELLS = frozenset({"sh", "dash", "bash"})
"""Processes a launch may pass through (a toolkit running its command through ``/bin/sh``): never a launcher."""


def is_rank(argv: list[str]) -> bool:
    """Whether a command line is the rank launcher's: ``python [-u] [-m mpi4py] _cloudddp_launch.py ...`` (a launcher
    names that file among its own arguments: torchrun's, mpirun's command lines are not ranks)."""
    if not argv or not os.path.basename(argv[0]).startswith("python"):
        return False
    rest = argv[1:]
    while rest and rest[0] in ("-u", "-m", "mpi4py", "-X", "faulthandler"):
        rest = rest[1:]
    return bool(rest) and rest[0].endswith(RANK_LAUNCHER)


def stop_targets(
    entry: int, processes: dict[int, tuple[int, str, list[str]]], names: Callable[[int], set[str]] = _environment
) -> list[int]:
    """Where a stop goes in a container: to each launcher of the job's ranks, once, as a normal launch does.

    The ranks are the rank launcher's processes (``_cloudddp_launch.py``). A rank that torchrun started
    (``TORCHELASTIC_RUN_ID``) is stopped by signalling torchrun's agent (past any shell in between): it passes the
    signal to each rank and waits ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` before it kills them. Every other rank is
    signalled itself, under Open MPI too (``mpirun`` or, on the other hosts, its ``orted``): Open MPI's mpirun,
    on SIGTERM, sends its ranks SIGCONT, waits ``odls_base_sigkill_timeout``, only then SIGTERM, waits again and
    SIGKILLs them, so signalled through mpirun a rank would hear the stop only after that timeout, and with it
    raised to the platform's grace never before the platform's SIGKILL; each host's init signals its own ranks,
    they save and exit 0, and mpirun ends as after any run. Never DataLoader workers, the toolkit or a launcher's
    helpers. Before any rank has started, every process but this one, the image's entry and the entry's own
    children (the toolkit, which reports how the job ended)."""
    ranks = [pid for pid, (_p, _n, argv) in processes.items() if is_rank(argv)]
    if not ranks:
        spared = {os.getpid(), entry} | {pid for pid, (parent, _n, _l) in processes.items() if parent == entry}
        return sorted(pid for pid in processes if pid not in spared)
    targets: set[int] = set()
    for pid in ranks:
        launcher = processes[pid][0]
        while launcher in processes and processes[launcher][1] in SHELLS:
            launcher = processes[launcher][0]
        torchrun = "TORCHELASTIC_RUN_ID" in names(pid) and launcher in processes
        targets.add(launcher if torchrun else pid)
    return sorted(targets)


def init(argv: list[str]) -> int:
    """Be the container's PID 1: run ``argv`` (the image's own entry) as a child, reap every orphan, and pass the
    first SIGTERM or SIGINT on to torchrun's agent or each MPI rank (:func:`stop_targets`).

    The PyTorch images' own PID 1 (``bash -m start_with_right_hostname.sh``) forwards no signal, so a
    StopTrainingJob, a spot interruption or MaxRuntime would SIGKILL the script after the grace without its
    final checkpoint. This process waits until everything it signalled has exited. Only as PID 1 of a container
    (a PID namespace); anywhere else it signals its child's process group.

    The exit status is the child's (128 + N when a signal N ended it).
    """
    # An init starts from a clean slate, and so does its child: whatever started it may have left signals blocked
    # or SIGCHLD ignored (then no exit status could be waited for).
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    reset = (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGPIPE)
    child = os.posix_spawnp(argv[0], argv, dict(os.environ), setpgroup=0, setsigmask=[], setsigdef=reset)
    stopping = False

    def forward(number: int, _frame: object) -> None:
        nonlocal stopping
        if stopping:
            return  # once: a second signal would reach each rank twice
        stopping = True
        targets = stop_targets(child, _processes()) if os.getpid() == 1 else [-child]
        for pid in targets:
            try:
                os.killpg(-pid, number) if pid < 0 else os.kill(pid, number)
            except (ProcessLookupError, PermissionError):
                continue
        print(f"{SHIPPED_AS}: signal {number} passed on to {len(targets)} process(es)", file=sys.stderr, flush=True)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    status: int | None = None
    while True:
        try:
            pid, raw = os.wait()
        except ChildProcessError:  # nothing left to wait for
            break
        if pid == child:
            code = os.waitstatus_to_exitcode(raw)
            status = 128 - code if code < 0 else code
            if not stopping:  # done; whatever is left (a daemon) ends with the container
                break
    return 0 if status is None else status


def has_entry(argv: list[str]) -> bool:
    """Whether the image has the entry ``argv`` names: its program on ``PATH`` and, for a shell (``bash -m
    start_with_right_hostname.sh train``), the script too, which the shell looks up on ``PATH``."""
    if shutil.which(argv[0]) is None:
        return False
    script = next((word for word in argv[1:] if not word.startswith("-")), None)
    return os.path.basename(argv[0]) not in SHELLS or script is None or shutil.which(script) is not None


def own_start() -> list[str]:
    """The command of cloudddp's own start: ``_cloudddp_start.py`` taken out of the code archive
    (``sagemaker_submit_directory``) into this file's folder."""
    import json
    import tarfile

    base = os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml")
    with open(os.path.join(base, "input", "config", "hyperparameters.json")) as f:
        archive = json.loads(json.load(f)["sagemaker_submit_directory"])
    target = os.path.join(os.path.dirname(os.path.abspath(__file__)), START_AS)
    with tarfile.open(archive) as tar, open(target, "wb") as out:
        member = tar.extractfile(START_AS)
        if member is None:
            raise SystemExit(f"{SHIPPED_AS}: {START_AS} is not in {archive}")
        out.write(member.read())
    return [sys.executable, target]


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(f"usage: {SHIPPED_AS} COMMAND [ARGS...]")
    argv = sys.argv[1:]
    if not has_entry(argv):
        print(
            f"{SHIPPED_AS}: the image has no {' '.join(argv)}: {START_AS} starts the job", file=sys.stderr, flush=True
        )
        argv = own_start()
    sys.exit(init(argv))


if __name__ == "__main__":
    main()
