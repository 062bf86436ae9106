"""The detached process that runs one local job: ``python -m cloudddp.backends.local.supervisor RUN_DIR``.

It reads the job's environment (secrets included) and the secret values to redact from stdin, so
nothing secret touches the disk;
starts one torchrun agent per node, each in its own process group; copies their output into
``logs/node<i>.log`` and global rank 0's metric lines into ``metrics.jsonl``; stops the nodes on SIGTERM
(cancel) or when the runtime limit passes, giving the training script a grace period to checkpoint;
and records how the run ended in ``status.json`` (the registry follows it when the run's status is read).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from cloudddp.backends.base import RunState
from cloudddp.backends.local import LocalBackend
from cloudddp.backends.local.rendezvous import ID_VARIABLE, host_store, new_rdzv_id
from cloudddp.backends.local.rundir import RunDir
from cloudddp.backends.procs import Process
from cloudddp.catalog.stepstore import keep_measured
from cloudddp.code.shim import RANK_LINE
from cloudddp.observe.metrics import PREFIX, RANK_ZERO, carries_metrics, patterns_from, record_of_line
from cloudddp.spec.secrets import redact, redaction_forms

GRACE_SECONDS = float(os.environ.get("CLOUDDDP_CANCEL_GRACE", "30"))
_FAILED_RANK = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank\s*:\s*(\d+)\)")
_EXITCODE = re.compile(r"exitcode\s*:\s*(-?\d+)")


class Supervisor:
    def __init__(self, run: RunDir, env: dict[str, str], secrets: list[str]) -> None:
        self.run = run
        self.plan = json.loads(run.plan.read_text())
        self.request = self.plan["request"]
        self.env = env
        self.secrets = redaction_forms(secrets)  # every form a secret may be printed in
        self.stop_reason: str | None = None
        self.stopping = threading.Event()
        self.procs: list[subprocess.Popen[str]] = []
        self.store: Any = None
        self.patterns = patterns_from(self.plan.get("metrics", []))
        self.ranks = str(self.plan.get("metric_ranks", RANK_ZERO))
        self.first_failed: int | None = None
        """The node whose agent failed first (the others were stopped because of it)."""

    def request_stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        self.stopping.set()

    def _pump(self, node: int, stream: IO[str]) -> None:
        """Copy one node's output to its log file; global rank 0's metric lines (CLOUDDDP_METRIC lines,
        and lines the job's declared patterns match) also go to metrics.jsonl.

        The stream is drained to its end whatever happens here: a node whose pipe is not read blocks on its
        next print, and the run would hang until limits.max_runtime. A line that fails to parse is skipped
        with one warning; a line that cannot be recorded is warned about (once) and dropped."""
        failed: set[str] = set()
        with contextlib.ExitStack() as files:
            try:
                log = files.enter_context(open(self.run.node_log(node), "a", encoding="utf-8"))
                metrics = files.enter_context(open(self.run.metrics, "a"))
            except OSError as e:
                print(f"warning: node {node}'s output is not recorded: {e}", flush=True)
                for _ in stream:  # drained, not recorded
                    pass
                return

            def warn(message: str) -> None:
                print(f"node {node}: {message}", flush=True)  # supervisor.log
                log.write(f"cloudddp: {message}\n")  # and where `cloudddp logs` shows it
                log.flush()

            for line in stream:
                try:
                    self._record(line, log, metrics, warn)
                except Exception as e:  # noqa: BLE001 - keep draining; say so once per kind of failure
                    if type(e).__name__ not in failed:
                        failed.add(type(e).__name__)
                        print(f"warning: node {node}: a line of output was not recorded: {e!r}", flush=True)

    def _record(self, line: str, log: IO[str], metrics: IO[str], warn: Callable[[str], None]) -> None:
        line = redact(line, self.secrets)
        log.write(line)
        log.flush()
        tag = RANK_LINE.match(line)
        rank = int(tag.group(1)) if tag else None
        if tag and carries_metrics(rank, self.ranks) and (PREFIX in line or self.patterns):
            text = line[tag.end() :].rstrip("\n")
            record = record_of_line(text, self.patterns, rank=rank, ranks=self.ranks, warn=warn)
            if record is not None:
                metrics.write(json.dumps({**record.to_dict(), "received": time.time()}) + "\n")
                metrics.flush()

    def start(self) -> None:
        # The store lives as long as this process; its id reaches the agents' environment only.
        self.store = host_store(int(self.request["rendezvous_port"]))
        base_env = {**os.environ, **self.env, ID_VARIABLE: new_rdzv_id()}
        for node in self.request["nodes"]:
            proc = subprocess.Popen(
                node["argv"],
                cwd=self.request["cwd"],
                env={**base_env, **node["env"]},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                errors="replace",
                bufsize=1,
                start_new_session=True,  # its own process group, so stopping a node stops all its ranks
            )
            self.procs.append(proc)
        self.run.write_status(
            state=RunState.RUNNING.value,
            started_at=time.time(),
            node_pgids=[p.pid for p in self.procs],
            node_processes=[(Process.of(p.pid) or Process(p.pid, -1, "")).record() for p in self.procs],
        )

    def _signal_nodes(self, sig: int) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    pass

    def wait(self) -> list[int]:
        pumps = [threading.Thread(target=self._pump, args=(i, p.stdout), daemon=True) for i, p in enumerate(self.procs)]
        for t in pumps:
            t.start()
        deadline = time.time() + float(self.request["max_runtime"])
        while None in [p.poll() for p in self.procs]:  # every node polled: any() would stop at the first alive
            if time.time() > deadline:
                self.request_stop("max_runtime")
            if self.stopping.wait(0.2):
                self._stop_nodes()
                break
            failed = [i for i, p in enumerate(self.procs) if p.returncode not in (None, 0)]
            if failed:
                # One node failed for good (its restarts are used up): the others cannot finish alone. An agent
                # killed by a signal is the cause when several have ended by now: torchrun itself exits 1 when
                # its ranks fail (here: because that node went away), it is never killed by a signal itself.
                self.first_failed = next((i for i in failed if (self.procs[i].returncode or 0) < 0), failed[0])
                self._stop_nodes(grace=5.0)
                break
        for p in self.procs:
            p.wait()
        for t in pumps:
            t.join(timeout=60)  # every line out (EOF comes once the ranks are gone), even on a loaded machine
        return [p.returncode for p in self.procs]

    def _stop_nodes(self, grace: float = GRACE_SECONDS) -> None:
        self._signal_nodes(signal.SIGTERM)  # each agent passes it to its ranks: they checkpoint and leave
        end = time.time() + grace
        while time.time() < end and None in [p.poll() for p in self.procs]:
            time.sleep(0.1)
        self._signal_nodes(signal.SIGKILL)
        # torchrun starts each rank in a session of its own: a rank whose agent was killed (or was lost)
        # outlives it. The run's processes carry its id in their environment; those that remain go too.
        for pid in run_processes(self.run.run_id):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):  # gone, or another user's that copied the marker
                pass

    def failure(self, codes: list[int]) -> dict[str, Any]:
        """Which rank failed and why, from torchrun's error summary, with the tail of its log; or which
        node was lost, when its agent itself was killed (a machine gone, out of memory)."""
        info: dict[str, Any] = {"exit_codes": codes}
        first = self.first_failed
        if first is None:  # every node had ended by the time they were polled: an agent killed by a signal first
            first = next((node for node, code in enumerate(codes) if code < 0), None)
        order = [first] if first is not None else []
        for node in [*order, *range(len(codes))]:
            code = codes[node]
            if code == 0:
                continue
            if code < 0 and node == first:  # the agent died, not a rank under it
                info.update(
                    node=node,
                    exitcode=code,
                    lost=True,
                    log_tail=self.run.node_log(node).read_text(errors="replace").splitlines()[-20:]
                    if self.run.node_log(node).exists()
                    else [],
                )
                break
            text = self.run.node_log(node).read_text(errors="replace") if self.run.node_log(node).exists() else ""
            summary = text[text.rfind("Root Cause") :] if "Root Cause" in text else ""
            rank = _FAILED_RANK.search(summary)
            exitcode = _EXITCODE.search(summary)
            info.update(node=node, exitcode=int(exitcode.group(1)) if exitcode else code)
            if rank:
                info.update(rank=int(rank.group(1)), local_rank=int(rank.group(2)))
                prefix = f"[rank{rank.group(1)}]:"
                lines = [ln[len(prefix) :] for ln in text.splitlines() if ln.startswith(prefix)]
            else:
                lines = []
            lines = lines or text[: text.find("Traceback")].splitlines()  # else what torchrun said
            info["log_tail"] = lines[-20:]
            break
        return info


def run_processes(run_id: str) -> list[int]:
    """The live processes whose environment names run ``run_id`` (CLOUDDDP_RUN_ID), this one excepted."""
    marker = f"CLOUDDDP_RUN_ID={run_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def redact_files(folder: Path, forms: list[str]) -> None:
    """torchrun's per-rank files (output, error files) hold the job's raw output; take secret values out of them.

    torchrun writes these files itself, so they are redacted when the run ends, not as they are written; until
    then they are private to the job's user (umask 077 in a 0700 home)."""
    if not forms or not folder.exists():
        return
    for path in folder.rglob("*"):
        if not path.is_file() or path.is_symlink():
            continue
        text = path.read_text(errors="replace")
        clean = redact(text, forms)
        if clean != text:
            path.write_text(clean)


def describe_failure(info: dict[str, Any]) -> str:
    if info.get("lost"):
        return f"node {info['node']} was lost: its torchrun agent was killed by signal {-info['exitcode']}"
    if "rank" in info:
        code = info.get("exitcode")
        why = f"killed by signal {-code}" if isinstance(code, int) and code < 0 else f"exit code {code}"
        return f"rank {info['rank']} (node {info.get('node', 0)}) failed: {why}"
    return f"node {info.get('node', 0)} failed with exit code {info.get('exitcode')}"


def main(argv: list[str]) -> int:
    os.umask(0o077)  # what the run writes (and its processes, which inherit it) is the job user's alone
    run = RunDir(Path(argv[0]))
    given = json.loads(sys.stdin.read() or "{}")
    sup = Supervisor(run, given.get("env", {}), given.get("secrets", []))
    signal.signal(signal.SIGTERM, lambda *_: sup.request_stop("cancelled"))
    signal.signal(signal.SIGINT, lambda *_: sup.request_stop("cancelled"))
    try:
        sup.start()
        codes = sup.wait()
    except Exception as e:  # the run must always get an end state, whatever broke
        run.write_status(state=RunState.FAILED.value, message=f"supervisor error: {e}", ended_at=time.time())
        raise
    extra: dict[str, Any]
    if sup.stop_reason == "cancelled":
        state, message, extra = RunState.CANCELLED, "cancelled", {"exit_codes": codes, "cause": "cancelled"}
    elif sup.stop_reason == "max_runtime":
        state, message = RunState.FAILED, f"stopped after limits.max_runtime ({sup.request['max_runtime']} s)"
        extra = {"exit_codes": codes, "cause": "limit"}
    elif all(c == 0 for c in codes):
        state, message, extra = RunState.SUCCEEDED, "finished", {"exit_codes": codes}
    else:
        failure = sup.failure(codes)
        state, message = RunState.FAILED, describe_failure(failure)
        extra = {
            "exit_codes": codes,
            "failure": failure,
            "cause": "infrastructure" if failure.get("lost") else "user error",
        }
    redact_files(run.ranks, sup.secrets)
    run.write_status(state=state.value, message=message, ended_at=time.time(), cpu_s=_children_cpu_seconds(), **extra)
    _learn_step_time(run)
    return 0


def _children_cpu_seconds() -> float:
    """User + system CPU time of every process of the run (torchrun waits for its workers, this for torchrun)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _learn_step_time(run: RunDir) -> None:
    """Keep the run's measured step time for the next estimate of the same job here, also when nobody looks at
    the run again (the runner records it in the run's registry info when it next reads the run's status)."""
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
