"""The detached process that runs one local job: ``python -m cloudddp.backends.local.supervisor RUN_DIR``.

It reads the job's environment (secrets included) and the secret values to redact from stdin, so
nothing secret touches the disk; starts one torchrun agent per node, each in its own process group
(:mod:`~cloudddp.backends.local.nodes`: the agent writes to a console file and a shell records its exit code, so a
node outlives this process whole); copies the consoles into ``logs/node<i>.log`` and global rank 0's metric lines
into ``metrics.jsonl`` (:mod:`~cloudddp.backends.local.console`); stops the nodes on SIGTERM (cancel), when the runtime
limit passes, or when no rank has printed anything for ``limits.stall_timeout`` (after dumping every rank's Python
stack into the log: :mod:`cloudddp.injob.stall`), giving the training script a grace period to checkpoint; and
records how the run ended in ``status.json`` (its run record follows it when the run's status is read).

``--adopt RUN_DIR`` is a supervisor for a run whose own one is gone (killed -9, out of memory) while its nodes may
still train: it takes the run's supervisor lock (``supervisor.lock``, held by one supervisor at a time), reads the
secret values to redact from the live nodes' environment, copies on from where the last one stopped, and does
everything else the same way. The run's checkpoint folder lock (:mod:`cloudddp.backends.folderlock`) names the
supervisor and the node groups, so it stays held while any of them lives.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from cloudddp.backends.folderlock import FolderLock
from cloudddp.backends.local import LocalBackend, recorded_nodes
from cloudddp.backends.local.agent_output import StopTracebackFolder
from cloudddp.backends.local.console import Cursor, Output, copy_lines
from cloudddp.backends.local.masking import RankFiles, byte_forms
from cloudddp.backends.local.nodes import LOST_CODE, Node, wrapped
from cloudddp.backends.local.outcome import STACKS_FOLLOW, conclude
from cloudddp.backends.local.processes import rank_processes, run_processes, secrets_of
from cloudddp.backends.local.rendezvous import ID_VARIABLE, READY, new_rdzv_id, port_of, sole_listener
from cloudddp.backends.local.request import LocalRequest
from cloudddp.backends.local.rundir import RunDir
from cloudddp.backends.procs import Process
from cloudddp.backends.status import Cause, RunState
from cloudddp.catalog.stepstore import keep_measured
from cloudddp.injob import stall
from cloudddp.injob.keepfiles import Keeper
from cloudddp.injob.shim import RANK_LINE
from cloudddp.observe.metrics import PREFIX, RANK_ZERO, carries_metrics, patterns_from, record_of_line
from cloudddp.plan import SECRET_PLACEHOLDER
from cloudddp.spec.secrets import redact, redaction_forms

GRACE_SECONDS = float(os.environ.get("CLOUDDDP_CANCEL_GRACE", "30"))
STALL_GRACE_SECONDS = 5.0
"""A stalled run is stopped with a short grace: its ranks are stuck, they cannot checkpoint."""
DUMP_WAIT_SECONDS = 10.0
"""How long the stacks of a stalled run's ranks are waited for before the nodes are stopped."""


class Supervisor:
    def __init__(self, run: RunDir, env: dict[str, str], secrets: list[str], store_fd: int | None = None) -> None:
        self.run = run
        self.store_fd = store_fd
        """The store's listening socket, bound by launch (None for a supervisor that adopts the run)."""
        self.plan = json.loads(run.plan.read_text())
        self.request = LocalRequest.from_dict(self.plan["request"])
        self.env = env
        self.secrets = redaction_forms(secrets)  # every form a secret may be printed in
        self.stop_reason: str | None = None
        self.stopping = threading.Event()
        self.signalled = threading.Event()
        """Set before this supervisor signals the nodes: an agent's SignalException is then no crash."""
        self.nodes: list[Node] = []
        self.patterns = patterns_from(self.plan.get("metrics", []))
        self.ranks = str(self.plan.get("metric_ranks", RANK_ZERO))
        self._metrics_lock = threading.Lock()
        self.first_failed: int | None = None
        self.keeper: Keeper | None = None
        """The node whose agent failed first (the others were stopped because of it)."""
        self.adopted = False
        self._rank_files: RankFiles | None = None
        self.copy_raw = True
        """False when secrets must be redacted and their values are not known here (an adopted run whose nodes
        are gone): then nothing more is copied from the raw consoles."""
        timeout = self.request.stall_timeout
        self.watchdog = stall.Watchdog(float(timeout)) if timeout else None
        ckpt = self.request.env.get("CLOUDDDP_CHECKPOINT_DIR")
        self.folder_lock = FolderLock(Path(ckpt)) if ckpt else None

    @property
    def rank_files(self) -> RankFiles:
        if self._rank_files is None:
            self._rank_files = RankFiles(self.run.ranks, byte_forms(self.secrets))
        return self._rank_files

    def request_stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        self.stopping.set()

    # -- starting or adopting the nodes ---------------------------------------------------------------
    def start(self) -> None:
        # The store is a process of its own, so the nodes can go on without this one; its id reaches the agents'
        # environment only. Every node's agent holds the store's socket too: the port stays bound while the run lives.
        if self.store_fd is None:
            raise StoreFailed("launch handed down no rendezvous socket")
        store = start_store(self.run, self.store_fd)
        self.run.write_status(store_pid=store.pid, store=store.record())
        base_env = {**os.environ, **self.env, ID_VARIABLE: new_rdzv_id()}
        self.keeper = keeper_for(self.request, self.env)
        if self.watchdog is not None:  # every Python process of the job can print its stacks on a signal
            hook = stall.install_hook(self.run.path / "hooks")
            python_path = os.pathsep.join(filter(None, [str(hook), base_env.get("PYTHONPATH")]))
            base_env |= {"PYTHONPATH": python_path, stall.SIGNAL_VARIABLE: str(stall.STACK_SIGNAL)}
        self.run.ranks.mkdir(exist_ok=True)
        for node in self.request.nodes:
            index = node.node_rank
            with open(self.run.console(index), "ab") as console:
                child = subprocess.Popen(
                    wrapped(node.argv, self.run.exit_file(index)),
                    cwd=self.request.cwd,
                    env={**base_env, **node.env},
                    stdout=console,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # its own process group, so stopping a node stops all its ranks
                    pass_fds=(self.store_fd,),
                )
            self.nodes.append(Node(index, Process.of(child.pid), self.run.exit_file(index), child))
        self.run.write_status(
            state=RunState.RUNNING.value,
            started_at=time.time(),
            node_pgids=[n.child.pid for n in self.nodes if n.child is not None],
            node_processes=[(n.process or Process(0, -1, "")).record() for n in self.nodes],
        )
        self._hold_checkpoints()

    def adopt(self) -> None:
        """Take over the nodes a supervisor that is gone started."""
        self.adopted = True
        self.nodes = recorded_nodes(self.run, self.run.read_status())
        live = [n.process.pid for n in self.nodes if n.process is not None and n.running()]
        names = [k for k, v in self.request.env.items() if SECRET_PLACEHOLDER.format(name=k) == v]
        values = secrets_of(live, names)
        self.secrets = redaction_forms(values)
        self.copy_raw = not names or len(values) == len(names)
        self.keeper = keeper_for(self.request, self.env, link=False)
        self._hold_checkpoints()

    def _hold_checkpoints(self) -> None:
        """The checkpoint folder stays held while this supervisor or any node group lives."""
        if self.folder_lock is not None:
            me = Process.of(os.getpid())
            holders = [p for p in [me, *(n.process for n in self.nodes)] if p is not None]
            self.folder_lock.hand_over(self.run.run_id, holders)

    # -- copying the consoles -------------------------------------------------------------------------
    def _copy(self, node: Node) -> None:
        """Copy one node's console to its log (rank 0's metric lines also to metrics.jsonl), from the cursor on.

        The console is drained to its end whatever happens here. A line that fails to parse is skipped with one
        warning; a line that cannot be recorded is warned about (once) and dropped."""
        cursor = Cursor(self.run.cursor(node.index))
        log = Output(self.run.node_log(node.index), cursor.log)
        metrics = self._metrics
        failed: set[str] = set()
        warned_raw = False
        # a held traceback is lost if this supervisor dies inside it
        folded = StopTracebackFolder(self.signalled.is_set)

        def warn(message: str) -> None:
            print(f"node {node.index}: {message}", flush=True)  # supervisor.log
            log.write(f"cloudddp: {message}\n")  # and where `cloudddp logs` shows it

        def handle(line: str) -> None:
            nonlocal warned_raw
            try:
                if not self.copy_raw:
                    if not warned_raw:
                        warn(
                            "the rest of this node's output is not copied: the supervisor that knew the job's "
                            "secret values is gone, and so are the processes they could be read from"
                        )
                        warned_raw = True
                    return
                for kept in folded.feed(line):
                    self._record(kept, log, metrics, warn)
            except Exception as e:  # noqa: BLE001 - keep draining; say so once per kind of failure
                if type(e).__name__ not in failed:
                    failed.add(type(e).__name__)
                    print(f"warning: node {node.index}: a line of output was not recorded: {e!r}", flush=True)
            cursor.log = log.length
            cursor.metrics = metrics.length

        try:
            secrets = byte_forms(self.secrets) if self.copy_raw else []
            copy_lines(self.run.console(node.index), cursor, handle, node.running, secrets=secrets)
            for kept in folded.flush():
                self._record(kept, log, metrics, warn)
        finally:
            log.close()
            cursor.close()

    def _record(self, line: str, log: Output, metrics: Output, warn: Any) -> None:
        line = redact(line, self.secrets)
        log.write(line)
        tag = RANK_LINE.match(line)  # torchrun's prefix: the global rank (the rendezvous decides which node has 0)
        rank = int(tag.group(1)) if tag else None
        if rank is not None and self.watchdog is not None:
            self.watchdog.heard(rank)
        if tag and carries_metrics(rank, self.ranks) and (PREFIX in line or self.patterns):
            text = line[tag.end() :].rstrip("\n")
            record = record_of_line(text, self.patterns, rank=rank, ranks=self.ranks, warn=warn)
            if record is not None:
                with self._metrics_lock:
                    metrics.write(json.dumps({**record.to_dict(), "received": time.time()}) + "\n")

    def notice(self, node: int, text: str) -> None:
        """A line of cloudddp's own in a node's log, in order with the node's output (through its console)."""
        with open(self.run.console(node), "a", encoding="utf-8") as console:
            console.write("".join(f"cloudddp: {line}\n" for line in text.splitlines()))

    # -- waiting ---------------------------------------------------------------------------------------
    def _open_metrics(self) -> Output:
        """``metrics.jsonl``, written by every node's copier (global rank 0 may be on any node; with
        ``metrics.ranks: all`` every rank is read). Each node's cursor holds the file's length after that node's
        last record, so a supervisor that takes over cuts the file back to the longest of them."""
        lengths = []
        for node in self.nodes:
            cursor = Cursor(self.run.cursor(node.index))
            lengths.append(cursor.metrics)
            cursor.close()
        return Output(self.run.metrics, max(lengths, default=0))

    def _mask_rank_files(self) -> None:
        """Secrets out of torchrun's per-rank files while the nodes write them (the rest when the run ends)."""
        while any([n.running() for n in self.nodes]):
            self.rank_files.sweep()
            time.sleep(0.2)

    def wait(self) -> list[int]:
        self._metrics = self._open_metrics()
        copiers = [threading.Thread(target=self._copy, args=(n,), daemon=True) for n in self.nodes]
        if self.secrets:
            copiers.append(threading.Thread(target=self._mask_rank_files, daemon=True))
        for t in copiers:
            t.start()
        deadline = (self.run.read_status().started_at or time.time()) + float(self.request.max_runtime)
        while any([n.running() for n in self.nodes]):  # every node polled: any() of a generator stops early
            if time.time() > deadline:
                self.request_stop("max_runtime")
            quiet = self.watchdog.quiet() if self.watchdog is not None and not self.stopping.is_set() else None
            if quiet is not None:
                self._stalled(quiet)
                break
            if self.stopping.wait(0.2):
                self._stop_nodes()
                break
            failed = [n.index for n in self.nodes if not n.running() and (n.exit_code() or 0) != 0]
            if failed:
                # One node failed for good (its restarts are used up): the others cannot finish alone. An agent
                # killed by a signal is the cause when several have ended by now: torchrun itself exits 1 when
                # its ranks fail (here: because that node went away), it is never killed by a signal itself.
                codes = {i: self.nodes[i].exit_code() for i in failed}
                self.first_failed = next((i for i in failed if (codes[i] or LOST_CODE) < 0), failed[0])
                self._stop_nodes(grace=5.0)
                break
        for n in self.nodes:
            if n.child is not None:
                n.child.wait()
            else:
                while n.running():
                    time.sleep(0.2)
        for t in copiers:
            t.join(timeout=60)  # every line out, even on a loaded machine
        self._metrics.close()
        return [code if (code := n.exit_code()) is not None else LOST_CODE for n in self.nodes]

    def _stalled(self, quiet: list[tuple[Any, float]]) -> None:
        """Name the quiet ranks, put their Python stacks in the log, fail the run as stalled."""
        assert self.watchdog is not None
        ranks = {rank: (node, pid) for (node, _local), (rank, pid) in rank_processes(self.run.run_id).items()}
        silence = dict(quiet)
        never = time.monotonic() - self.watchdog.started
        for key in ranks:  # a rank that never printed has been quiet since the start
            silence.setdefault(key, never)
        named = [
            f"rank {rank} quiet for {silent:.0f} s" for rank, silent in sorted(silence.items(), key=lambda i: -i[1])
        ]
        reason = f"stalled: no rank printed anything for {self.watchdog.timeout:.0f} s (limits.stall_timeout)" + (
            f": {', '.join(named)}" if named else ""
        )
        for node in self.nodes:
            self.notice(node.index, f"{reason}; {STACKS_FOLLOW}")
        pending = set()
        before = dict(self.watchdog.last)  # a dump is heard as new lines from its rank
        for rank, (index, pid) in sorted(ranks.items()):
            dump = stall.py_spy_dump(pid)
            if dump is not None:
                with open(self.run.console(index), "a", encoding="utf-8") as console:
                    console.write("".join(f"[rank{rank}]:{line}\n" for line in dump.splitlines()))
            elif stall.catches(pid) and (process := Process.of(pid)) is not None and process.signal(stall.STACK_SIGNAL):
                pending.add(rank)
            else:
                self.notice(index, f"rank {rank}: no Python stack (process {pid} does not handle the stack signal)")
        # faulthandler writes to the rank's stderr, which torchrun copies to the console: wait to hear each one
        asked = time.monotonic()
        while pending and time.monotonic() - asked < DUMP_WAIT_SECONDS:
            pending = {s for s in pending if self.watchdog.last.get(s) == before.get(s)}
            time.sleep(0.2)
        time.sleep(0.5)  # the rest of each stack: faulthandler writes it at once, torchrun copies it line by line
        self.request_stop(reason)
        self._stop_nodes(grace=STALL_GRACE_SECONDS)

    def _stop_nodes(self, grace: float = GRACE_SECONDS) -> None:
        self.signalled.set()
        for node in self.nodes:  # each agent passes it to its ranks: they checkpoint and leave
            node.signal_group(signal.SIGTERM)
        end = time.time() + grace
        while time.time() < end and any([n.running() for n in self.nodes]):
            time.sleep(0.1)
        for node in self.nodes:
            node.signal_group(signal.SIGKILL)
        # torchrun starts each rank in a session of its own: a rank whose agent was killed (or was lost)
        # outlives it. The run's processes carry its id in their environment; those that remain go too.
        for pid in run_processes(self.run.run_id):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):  # gone, or another user's that copied the marker
                pass

    def finish(self, codes: list[int]) -> None:
        ending = conclude(self.run, codes, self.stop_reason, self.first_failed, max_runtime=self.request.max_runtime)
        if self.keeper is not None:
            self.keeper.save(final=True)  # a file the script renamed over its link
        if self.copy_raw and self.secrets:
            self.rank_files.sweep(final=True)
            redact_files(self.run.ranks, self.secrets)  # what else torchrun wrote there (error files)
        # the nodes' CPU time is known only to the process that waited for them
        own: dict[str, Any] = {"adopted": True} if self.adopted else {"cpu_s": _children_cpu_seconds()}
        store = self.run.read_status().store_process()
        if store is not None:
            store.signal(signal.SIGTERM)
        changes = ending.changes() | own
        self.run.write_status(state=ending.state.value, message=ending.message, ended_at=time.time(), **changes)
        if self.folder_lock is not None:
            self.folder_lock.release(self.run.run_id)


STORE_START_SECONDS = 120.0


class StoreFailed(RuntimeError):
    """The rendezvous store did not start: the machine's fault (no memory, torch broken), never the job's."""


def start_store(run: RunDir, fd: int) -> Process:
    """The rendezvous store as a process of its own, in a session of its own, serving the listening socket ``fd``
    (bound by launch: :mod:`~cloudddp.backends.local.rendezvous`); verified and serving when this returns.

    Ready is the store's own word over a private pipe, said after it read a random key back through the port, and
    the socket handed down still the port's only listener: nothing that merely accepts connections on the port is
    taken for it."""
    child = subprocess.Popen(  # its stderr is this process's: supervisor.log, at the same offset
        [sys.executable, "-m", "cloudddp.backends.local.store_server", "--fd", str(fd), str(run.path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=True,
        pass_fds=(fd,),
    )
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], STORE_START_SECONDS)
    line = child.stdout.readline().decode(errors="replace").split() if ready else []
    child.stdout.close()
    process = Process.of(child.pid)
    if line == [READY, str(port_of(fd))] and process is not None and sole_listener(fd):
        return process
    child.kill()
    child.wait()
    raise StoreFailed("the rendezvous store did not start (supervisor.log says why)")


def keeper_for(request: LocalRequest, env: dict[str, str], *, link: bool = True) -> Keeper | None:
    """The run's ``checkpoint.files``, linked into its checkpoint folder (one code folder serves every node here);
    ``link=False`` for a run being adopted, whose nodes already run with the links: only the saving goes on."""
    declared, folder = request.keep_files, env.get("CLOUDDDP_CHECKPOINT_DIR")
    if not declared or not folder:
        return None
    keeper = Keeper(declared, request.cwd, folder)
    for note in keeper.link(fresh=env.get("CLOUDDDP_RESUME") == "never") if link else []:
        print(note, flush=True)  # into supervisor.log
    keeper.keep_saving()  # a file renamed over its link is saved while the run goes on, not only at its end
    return keeper


def redact_files(folder: Path, forms: list[str]) -> None:
    """torchrun's per-rank files (output, error files) hold the job's raw output; take secret values out of them.

    The output files and the consoles are masked as they are written (:mod:`~cloudddp.backends.local.masking`);
    this catches what else is there when the run ends. All of them are private to the job's user (umask 077 in a
    0700 home)."""
    if not forms or not folder.exists():
        return
    for path in folder.rglob("*"):
        if not path.is_file() or path.is_symlink():
            continue
        text = path.read_text(errors="replace")
        clean = redact(text, forms)
        if clean != text:
            path.write_text(clean)


def main(argv: list[str]) -> int:
    os.umask(0o077)  # what the run writes (and its processes, which inherit it) is the job user's alone
    adopting = argv[:1] == ["--adopt"]
    run = RunDir(Path(argv[-1]))
    if adopting:
        lock = run.supervisor_lock()
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held until this process ends, however it ends
        except BlockingIOError:
            return 0  # another supervisor has the run
        if run.read_status().run_state.terminal:
            return 0
        me = Process.of(os.getpid())
        run.write_status(supervisor_pid=os.getpid(), supervisor=me.record() if me else None, adopted_at=time.time())
        print(f"adopting the run's nodes: its supervisor is gone (pid {os.getpid()})", flush=True)
        sup = Supervisor(run, {}, [])
    else:  # the launcher holds the supervisor lock for this process (an inherited descriptor)
        given = json.loads(sys.stdin.read() or "{}")
        sup = Supervisor(run, given.get("env", {}), given.get("secrets", []), given.get("store_fd"))
    signal.signal(signal.SIGTERM, lambda *_: sup.request_stop("cancelled"))
    signal.signal(signal.SIGINT, lambda *_: sup.request_stop("cancelled"))
    try:
        sup.adopt() if adopting else sup.start()
        sup.finish(sup.wait())
    except Exception as e:  # the run must always get an end state, whatever broke
        cause = {"cause": Cause.INFRASTRUCTURE.value} if isinstance(e, StoreFailed) else {}
        run.write_status(state=RunState.FAILED.value, message=f"supervisor error: {e}", ended_at=time.time(), **cause)
        raise
    _learn_step_time(run)
    return 0


def _children_cpu_seconds() -> float:
    """User + system CPU time of every process of the run (torchrun waits for its workers, this for torchrun)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _learn_step_time(run: RunDir) -> None:
    """Keep the run's measured step time for the next estimate of the same job here, also when nobody looks at
    the run again (the runner records it in the run record's info when it next reads the run's status)."""
    try:
        step_key = json.loads(run.plan.read_text()).get("step_key")
        backend = LocalBackend()
        bill = backend.bill(run.run_id)
        if step_key and bill is not None and bill.final:
            keep_measured(run.run_id, step_key, bill, backend.metrics(run.run_id))
    except Exception as e:  # noqa: BLE001 - the run has ended and is recorded; this is a bonus
        print(f"the run's step time was not kept: {e}", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
