"""The local backend: torchrun on this machine, supervised by a detached process.

``launch`` starts ``python -m cloudddp.backends.local.supervisor`` in a new session; the supervisor
starts one ``python -m torch.distributed.run`` per "node" (c10d rendezvous through a store it hosts on
127.0.0.1 only, joined by a random id from the environment: see ``rendezvous.py``), tees their
output into the run folder, enforces the runtime limit and records how the run ended. So ``status``,
``logs``, ``metrics`` and ``cancel`` work from any shell, after the submitting CLI has exited. The nodes and the
store outlive a lost supervisor; :meth:`LocalBackend.adopt` starts a new one (``docs/supervisor.md``), and the
run's checkpoint folder is held by one run at a time (:mod:`cloudddp.backends.folderlock`).

Its modules: the ``local:`` section (``options.py``); the render: its choices (``decide.py``), the typed request
and ``torchrun.sh`` (``request.py``, ``build.py``, ``script.py``), the plan's lines (``explain.py``) and its time
estimate (``estimate.py``); the launch (``launch.py``) and the run folder with its typed ``status.json``
(``rundir.py``, ``record.py``); the supervisor (``supervisor.py``) and what it runs: the node groups
(``nodes.py``), the rendezvous store and its server (``rendezvous.py``, ``store_server.py``), the node consoles
copied into the log (``console.py``), the agents' own lines (``agent_output.py``), secrets masked as files are
written (``masking.py``), the run's processes found in /proc (``processes.py``) and how the run ended
(``outcome.py``); every rank's stacks on demand (``stacks.py``); what a run held (``bill.py``); its checkpoint
folder as a store (``checkpoint_store.py``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from cloudddp.backends.base import Backend, Launched, Progress
from cloudddp.backends.checks import Check
from cloudddp.backends.features import Capabilities, Feature
from cloudddp.backends.local import build
from cloudddp.backends.local.bill import bill
from cloudddp.backends.local.checkpoint_store import LocalCheckpoints
from cloudddp.backends.local.decide import decide
from cloudddp.backends.local.explain import explain
from cloudddp.backends.local.launch import launch
from cloudddp.backends.local.nodes import LOST_CODE, Node
from cloudddp.backends.local.options import LocalOptions
from cloudddp.backends.local.outcome import conclude
from cloudddp.backends.local.record import LocalRunStatus
from cloudddp.backends.local.request import LocalRequest
from cloudddp.backends.local.rundir import RunDir
from cloudddp.backends.local.stacks import capture
from cloudddp.backends.procs import Process
from cloudddp.backends.status import Cause, LogLine, RunState, RunStatus
from cloudddp.catalog.bill import Bill
from cloudddp.injob.culprit import Capture
from cloudddp.injob.keepfiles import left_behind_notice
from cloudddp.injob.shim import RANK_LINE
from cloudddp.observe.metrics import MetricRecord, record_from_dict
from cloudddp.observe.tail import follow_lines
from cloudddp.plan import Folder, Plan
from cloudddp.spec.model import JobSpec
from cloudddp.spec.secrets import redacted_spec_data

CANCEL_GRACE_SECONDS = float(os.environ.get("CLOUDDDP_CANCEL_GRACE", "30"))
ADOPT_WAIT_SECONDS = 30.0
"""How long a cancel waits for a new supervisor to take over a run whose own one is gone, before it stops the
nodes itself (without the grace)."""
SUPERVISOR_LOST = "running (supervisor lost)"


def parse_rank_line(line: str, node: int, nodes: int) -> LogLine:
    """torchrun's ``--tee`` prefixes each worker line with its global rank (:data:`build.RANK_TAG`); a line without
    it is torchrun's own (or cloudddp's), from outside the program."""
    tag = RANK_LINE.match(line)
    if tag:
        rank = int(tag.group(1))
        source = f"rank{rank}" if nodes == 1 else f"node{node}/rank{rank}"
        return LogLine(source, line[tag.end() :], primary=rank == 0, rank=rank)
    return LogLine(f"node{node}/torchrun" if nodes > 1 else "torchrun", line, primary=False)


class LocalBackend(Backend[LocalOptions]):
    name: ClassVar[str] = "local"
    description: ClassVar[str] = "torchrun on this machine (CPU or GPUs), multi-node simulated with N torchrun agents"
    options_model = LocalOptions
    request_type = LocalRequest
    sigterm_grace: ClassVar[int] = int(CANCEL_GRACE_SECONDS)
    watches_stalls: ClassVar[bool] = True
    no_budget_reason: ClassVar[str] = (
        "this machine has no price: a local run's cost is its GPU-hours (or CPU-hours), which `cloudddp cost` reports"
    )
    capabilities: ClassVar[Capabilities] = Capabilities(
        unsupported={
            Feature.REMOTE_INPUTS: "the local backend reads local folders only; copy s3:// or azureml:// data "
            "here first (or give inputs.<name>.at.local)",
            Feature.SMDDP: "the SageMaker data-parallel library runs only in SageMaker's containers; "
            "use -o distribution.backend=auto here",
            Feature.PROVISION: "the local backend runs on this machine; there is no cluster to create or leave alone",
        },
        caveats={
            Feature.SPOT: "there is no spot capacity on this machine; resources.spot is ignored here",
            Feature.MPI: "the local backend starts processes with torchrun; distribution.launcher: mpi applies "
            "on the clouds",
        },
    )

    # -- render ------------------------------------------------------------------------------
    def _render(self, spec: JobSpec) -> Plan[LocalRequest, Folder]:
        """Every choice made once (:mod:`~cloudddp.backends.local.decide`), the request and ``torchrun.sh`` built
        from it, the plan's lines said from it."""
        decision = decide(spec, self.options(spec), backend=self.name, sigterm_grace=self.sigterm_grace)
        request = build.request(decision)
        decisions, warnings = explain(decision)
        return Plan(
            backend=self.name,
            job_name=spec.name,
            request=request,
            documents=build.documents(decision, request),
            decisions=decisions,
            warnings=warnings,
            estimate=decision.estimate,
            uploads=[decision.upload],
            target=Folder(str(decision.checkpoints.folder) if decision.checkpoints else None),
            job=redacted_spec_data(spec),
            late=build.late_names(decision),
            env_sources=decision.env_sources,
        )

    def _preflight(self, plan: Plan[LocalRequest]) -> list[Check]:
        req = plan.request
        checks = []
        torch_spec = importlib.util.find_spec("torch")
        checks.append(
            Check(
                "torch installed",
                torch_spec is not None,
                f"in {sys.executable}" if torch_spec else f"torch is not importable by {sys.executable}",
                fix="pip install 'cloudddp[train]' -c constraints.txt",
            )
        )
        if req.device == "cuda":
            gpus = len(list(Path("/dev").glob("nvidia[0-9]*")))
            checks.append(
                Check(
                    "one GPU per process",
                    req.nproc_per_node <= gpus,
                    f"{req.nproc_per_node} processes per node, {gpus} GPUs here",
                    fix="set local.processes_per_node to the number of GPUs",
                )
            )
        for name, value in req.env.items():
            if name.startswith("CLOUDDDP_INPUT_"):
                checks.append(
                    Check(
                        f"input {name[15:].lower()} exists",
                        Path(value).exists(),
                        value,
                        fix="fix inputs.<name>.path (relative to the spec file)",
                    )
                )
        ckpt = req.env.get("CLOUDDDP_CHECKPOINT_DIR")
        if ckpt:
            parent = next((p for p in [Path(ckpt), *Path(ckpt).parents] if p.exists()), Path("/"))
            checks.append(
                Check(
                    "checkpoint folder writable",
                    os.access(parent, os.W_OK),
                    ckpt,
                    fix="set checkpoint.path to a writable folder",
                )
            )
        return checks

    # -- launch ------------------------------------------------------------------------------
    def _launch(self, plan: Plan[LocalRequest], *, provision: bool, progress: Progress | None) -> Launched:
        return launch(plan, progress)

    # -- run verbs ---------------------------------------------------------------------------
    def _checkpoint_store(self, location: str, target: Folder) -> LocalCheckpoints:
        return LocalCheckpoints(Path(location))

    def _run(self, run_id: str) -> RunDir:
        return RunDir.for_run(run_id)

    def _describe(self, run_id: str) -> RunStatus | None:
        run = self._run(run_id)
        if not run.status_file.exists():
            return None
        st = run.read_status()
        state, message = st.run_state, st.message
        cause = Cause(st.cause) if st.cause else None
        supervisor = st.supervisor_process()
        if not state.terminal and not (supervisor is not None and supervisor.alive()):
            # The supervisor is gone without writing an end state (killed -9, out of memory, machine rebooted):
            # the state follows the nodes, not the supervisor.
            nodes = recorded_nodes(run, st)
            if not all([n.ended() for n in nodes]):
                state, message = RunState.RUNNING, SUPERVISOR_LOST
            else:
                codes = [code if (code := n.exit_code()) is not None else LOST_CODE for n in nodes]
                ending = conclude(run, codes, "cancelled" if st.cancel_requested else None)
                state, cause = ending.state, ending.cause
                message = ending.message + " (decided from what the nodes recorded: the run's supervisor is gone)"
                st = st.updated(**ending.changes())
        elif not state.terminal and st.cancel_requested:  # the script's grace: asked again, no second SIGTERM
            state, message = RunState.STOPPING, "stopping: cancelled, the script is given its grace to save"
        elif not state.terminal and st.adopted_at:
            at = time.strftime("%H:%M:%S", time.localtime(st.adopted_at))
            message = f"{state.value} (its supervisor was lost; a new one took over at {at})"
        details = st.details() | {"run_dir": str(run.path)}
        left = run.left_behind() if state.terminal else []
        if left:
            details["left_behind"] = left
            message += "; " + left_behind_notice(left)
        return RunStatus(
            run_id=run_id,
            backend=self.name,
            state=state,
            name=st.name if st.name is not None else run_id.rsplit("-", 3)[0],
            native_state=st.state or "",
            message=message,
            created_at=st.created_at,
            ended_at=st.ended_at,
            details=details,
            cause=cause,
        )

    def _finished(self, run_id: str) -> bool:
        """Whether a followed run has ended; one whose supervisor is lost meanwhile gets a new one, so the lines
        keep coming (`logs -f`, `metrics -f` and the attached view follow through here)."""
        self.adopt(run_id)
        return self.status(run_id).state.terminal

    def _log_iter(self, run_id: str, *, follow: bool) -> Iterator[LogLine]:
        paths = self._run(run_id).node_logs()
        for node, line in follow_lines(paths, follow=follow, finished=lambda: self._finished(run_id)):
            yield parse_rank_line(line, node, len(paths))

    def _metric_iter(self, run_id: str, *, follow: bool) -> Iterator[MetricRecord]:
        """Global rank 0's metric records (every rank's with ``metrics.ranks: all``), as the supervisor captured
        them."""
        metrics = self._run(run_id).metrics
        for _, line in follow_lines([metrics], follow=follow, finished=lambda: self._finished(run_id)):
            try:
                record = record_from_dict(json.loads(line), "rank0")
            except (ValueError, RecursionError):  # a damaged line of the file: skipped
                continue
            if record is not None:
                yield record

    def _bill(self, run_id: str) -> Bill | None:
        """Held time from the supervisor's clock, as GPU-hours (one GPU per process) or the CPU time the run's
        processes used; there is no price on this machine."""
        run = self._run(run_id)
        st, request = run.read_status(), run.request()
        return bill(request, st, final=self.status(run_id).state.terminal)

    def _stacks(self, run_id: str) -> Capture:
        return capture(self._run(run_id))

    def _adopt(self, run_id: str) -> bool:
        """A new supervisor (``supervisor --adopt``) for a run not recorded as ended whose supervisor is gone: it
        follows the nodes if they still train, and records how the run ended either way."""
        run = self._run(run_id)
        st = run.read_status()
        if st.run_state.terminal or st.supervisor_pid is None:
            return False  # ended, or still being launched
        supervisor = st.supervisor_process()
        if supervisor is not None and supervisor.alive():
            return False
        with open(run.path / "supervisor.log", "ab") as log:
            subprocess.Popen(
                [sys.executable, "-m", "cloudddp.backends.local.supervisor", "--adopt", str(run.path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=run.path,
                start_new_session=True,
                umask=0o077,
            )
        return True

    def _adopted_supervisor(self, run: RunDir) -> Process | None:
        """The supervisor that took over the run (waited for), or None when none did in time."""
        deadline = time.monotonic() + ADOPT_WAIT_SECONDS
        while time.monotonic() < deadline:
            st = run.read_status()
            supervisor = st.supervisor_process()
            if supervisor is not None and supervisor.alive():
                return supervisor
            if st.run_state.terminal:
                return None
            time.sleep(0.1)
        return None

    def _cancel(self, run_id: str) -> None:
        run = self._run(run_id)
        supervisor = run.read_status().supervisor_process()
        run.write_status(cancel_requested=True)
        if not (supervisor is not None and supervisor.alive()) and self.adopt(run_id):
            supervisor = self._adopted_supervisor(run)  # it stops the nodes with the same grace and escalation
        if supervisor is not None and supervisor.alive() and supervisor.signal(signal.SIGTERM):
            # the supervisor stops the nodes, waits for checkpoints, records the end
            deadline = time.time() + CANCEL_GRACE_SECONDS + 10
            while time.time() < deadline and supervisor.alive():
                time.sleep(0.1)
        # Whatever is left (a supervisor killed -9, a hung worker) goes now, process group by process group:
        # only groups whose recorded leader is still that process (or gone, its group left behind).
        st = run.read_status()
        for process in [*st.node_groups(), supervisor, st.store_process()]:
            if process is not None:
                process.signal_group(signal.SIGKILL)
        if not run.read_status().run_state.terminal:
            run.write_status(state=RunState.CANCELLED.value, message="cancelled", ended_at=time.time())


def recorded_nodes(run: RunDir, st: LocalRunStatus) -> list[Node]:
    """The run's node groups as recorded in ``status.json``."""
    return [Node(i, process, run.exit_file(i)) for i, process in enumerate(st.node_groups())]


__all__ = ["LocalBackend", "LocalOptions"]
