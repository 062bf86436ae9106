"""Asking a job's ranks on one machine for every thread's Python stack, leaving them running (``cloudddp stacks``).

The local backend calls it in cloudddp's own process; on Slurm its source runs on each node of the job, in an
``srun --overlap`` step (``python3 -c``, :func:`main`), so it imports nothing but the standard library, not even the
rest of cloudddp.

- **Which process.** A rank's program is found in ``/proc`` by its environment: ``RANK`` and ``LOCAL_RANK``, and the
  variable that names the job (``CLOUDDDP_RUN_ID=<run>`` locally; on Slurm ``SLURM_JOB_ID=<job>`` and the node's
  ``SLURMD_NODENAME``, as nodes may share one machine). Its DataLoader workers carry the same variables and the rank
  launcher (:mod:`cloudddp.injob.shim`) is never one: of a rank's processes the one asked is the top of its tree (its
  parent is none of them), so each rank is asked once.
- **How.** ``py-spy dump`` where py-spy is on ``PATH`` and may attach (it needs ptrace rights, which Yama's default
  scope gives only to an ancestor of the process); else, for a process that handles it (``SigCgt`` in
  ``/proc/<pid>/status``), :data:`STACK_SIGNAL`: every Python process of a job writes all its threads' stacks to its
  stderr on it and goes on (:func:`cloudddp.injob.stop_hooks.answer_stack_signal`), so they reach the run's log,
  where the caller reads them (:func:`gather`). A process that handles neither is named, never signalled: the signal
  would kill it; it is looked at again for :data:`STARTING_SECONDS` first, as a rank caught starting registers its
  handler a moment later.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

STACK_SIGNAL = int(signal.SIGRTMIN) + 5
"""The signal a job's Python processes answer with their stacks (:data:`cloudddp.injob.stop_hooks.STACK_SIGNAL`)."""
LAUNCHERS = ("cloudddp.injob.shim", "_cloudddp_launch.py")
"""How the rank launcher appears in a command line (run as cloudddp's module locally, as its shipped copy)."""
WAIT_SECONDS = 30.0
"""How long the stacks of the ranks that were signalled are waited for in the run's log: the wait ends as soon as
every one has written, so only a rank that never writes costs all of it, and a busy node's log (a loaded machine,
a shared file system) may follow its ranks by many seconds."""
QUIET_SECONDS = 1.0
"""A rank's stacks are complete once none of its stack lines came for this long (faulthandler has no end mark)."""
STARTING_SECONDS = 3.0
"""How long a rank's process that does not handle :data:`STACK_SIGNAL` yet is looked at again before it is named as
one that never will: a Python program registers the handler as it starts (its ``sitecustomize``), so a rank caught
starting (a restart, a loaded machine) answers a moment later."""


def catches(pid: int, sig: int = STACK_SIGNAL) -> bool:
    """Whether process ``pid`` has a handler for ``sig`` (so the signal does not kill it)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def handles_soon(pid: int, wait: float = STARTING_SECONDS) -> bool:
    """Whether process ``pid`` handles :data:`STACK_SIGNAL` now or within ``wait`` seconds (:func:`catches`)."""
    deadline = time.monotonic() + wait
    while not catches(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def py_spy_dump(pid: int, timeout: float = 20) -> str | None:
    """``py-spy dump`` of ``pid``; None when py-spy is not on PATH or could not attach."""
    tool = shutil.which("py-spy")
    if tool is None:
        return None
    try:
        done = subprocess.run([tool, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 and done.stdout.strip() else None


@dataclass
class Answer:
    """One rank's answer: ``how`` is ``py-spy`` (``text``: its dump), ``signal`` (asked: the stacks go to the log),
    ``faulthandler`` (``text``: what it wrote there) or ``none`` (``text``: why there is no stack)."""

    rank: int
    pid: int
    node: str
    host: str
    how: str
    text: str = ""
    world: int = 0
    local: int = 0


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _launcher(pid: int) -> bool:
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False
    return any(word == LAUNCHERS[0] or word.endswith(LAUNCHERS[1]) for word in words)


def ranks_here(markers: list[str]) -> dict[int, tuple[int, dict[str, str]]]:
    """rank -> (pid, environment) of the program process of each rank of the job whose processes carry every one of
    ``markers`` (``NAME=value``) in their environment, on this machine."""
    wanted = dict(marker.partition("=")[::2] for marker in markers)
    candidates: dict[int, dict[int, dict[str, str]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        env = _environ(int(entry))
        if (
            any(env.get(k) != v for k, v in wanted.items())
            or not env.get("RANK", "").isdigit()
            or not env.get("LOCAL_RANK", "").isdigit()
        ):
            continue
        if not _launcher(int(entry)):
            candidates.setdefault(int(env["RANK"]), {})[int(entry)] = env
    found = {}
    for rank, processes in candidates.items():
        tops = sorted(pid for pid in processes if _parent(pid) not in processes)
        pid = next((p for p in tops if catches(p)), tops[0] if tops else min(processes))
        found[rank] = (pid, processes[pid])
    return found


def ask(rank: int, pid: int, node: str, host: str) -> Answer:
    """Rank ``rank``'s stacks through py-spy, else ask process ``pid`` for them with :data:`STACK_SIGNAL`."""
    dump = py_spy_dump(pid)
    if dump is not None:
        return Answer(rank, pid, node, host, "py-spy", dump)
    if not handles_soon(pid):
        why = f"process {pid} does not handle the stack signal (not Python, or CLOUDDDP_FRAMEWORK_HOOKS=off)"
        return Answer(rank, pid, node, host, "none", why)
    try:
        os.kill(pid, STACK_SIGNAL)
    except OSError as e:
        return Answer(rank, pid, node, host, "none", f"process {pid}: {e.strerror}")
    return Answer(rank, pid, node, host, "signal")


def ask_all(markers: list[str], node_variable: str, host: str) -> list[Answer]:
    """Every rank of the job here (:func:`ranks_here`), asked once (:func:`ask`), by rank; its host is the Slurm node
    it runs on where it has one, else ``host``."""
    answers = []
    for rank, (pid, env) in sorted(ranks_here(markers).items()):
        answer = ask(rank, pid, env.get(node_variable, "0"), env.get("SLURMD_NODENAME") or host)
        answer.world, answer.local = int(env.get("WORLD_SIZE", "0") or 0), int(env["LOCAL_RANK"])
        answers.append(answer)
    return answers


_HEAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+)")
_FRAME = re.compile(r'^\s+(File ".*", line \d+ in |<no Python frame>)')


def gather(
    read: Callable[[], Iterable[tuple[int, str]]],
    asked: Iterable[int],
    *,
    wait: float = WAIT_SECONDS,
    quiet: float = QUIET_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[int, str]:
    """rank -> the stacks it wrote, from the lines each call of ``read`` gives (``(rank, text)``, each line of the
    run's log printed since the call before) until every rank in ``asked`` has written and been quiet for ``quiet``
    seconds, or ``wait`` seconds pass. A rank's first dump only: a thread it has shown already starts another
    (the stall watchdog's, a second ``cloudddp stacks``), which is left out."""
    lines: dict[int, list[str]] = {rank: [] for rank in asked}
    threads: dict[int, set[str]] = {rank: set() for rank in lines}
    heard: dict[int, float] = {}
    closed: set[int] = set()
    start = clock()
    while True:
        now = clock()
        for rank, text in read():
            if rank not in lines or rank in closed:
                continue
            head = _HEAD.match(text)
            if head and head.group(1) in threads[rank]:
                closed.add(rank)
                continue
            if head:
                threads[rank].add(head.group(1))
            elif not (threads[rank] and _FRAME.match(text)):
                continue
            lines[rank].append(text)
            heard[rank] = now
        pending = [r for r in lines if r not in closed and (r not in heard or now - heard[r] < quiet)]
        if not pending or now - start >= wait:
            return {rank: "\n".join(text) for rank, text in lines.items() if text}
        sleep(0.1)


def answered(answers: Iterable[Answer], dumps: dict[int, str], wait: float = WAIT_SECONDS) -> list[Answer]:
    """``answers`` with what each signalled rank wrote (:func:`gather`): ``faulthandler``, or ``none`` saying so."""
    out = []
    for a in answers:
        if a.how == "signal":
            text = dumps.get(a.rank)
            late = f"no stack in its log {wait:.0f} s after asking process {a.pid}"
            a.how, a.text = ("faulthandler", text) if text else ("none", late)
        out.append(a)
    return out


def main(argv: list[str]) -> int:
    """``NODE_VARIABLE MARKER...``: ask every rank of the job on this node, one JSON answer a line. A marker without
    ``=`` is the variable's value in this process (``SLURMD_NODENAME``: the ranks of this node only, where several
    nodes share one machine's processes)."""
    markers = [m if "=" in m else f"{m}={os.environ.get(m, '')}" for m in argv[1:]]
    for answer in ask_all(markers, argv[0], socket.gethostname()):
        print(json.dumps(asdict(answer)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
