"""The local backend: torchrun on this machine, supervised by a detached process.

``launch`` starts ``python -m cloudddp.backends.local.supervisor`` in a new session; the supervisor
starts one ``python -m torch.distributed.run`` per "node" (c10d rendezvous through a store it hosts on
127.0.0.1 only, joined by a random id from the environment: see ``rendezvous.py``), tees their
output into the run folder, enforces the runtime limit and records how the run ended. So ``status``,
``logs``, ``metrics`` and ``cancel`` work from any shell, after the submitting CLI has exited. The nodes and the
store outlive a lost supervisor; :meth:`LocalBackend.adopt` starts a new one (``docs/supervisor.md``), and the
run's checkpoint folder is held by one run at a time (:mod:`cloudddp.backends.folderlock`).
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import secrets as _random
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from cloudddp.backends import torchrun
from cloudddp.backends.base import Backend, Launched, Progress
from cloudddp.backends.checks import Check
from cloudddp.backends.features import Capabilities, Feature
from cloudddp.backends.folderlock import LOCK_NAME, FolderLock
from cloudddp.backends.local.nodes import LOST_CODE, Node
from cloudddp.backends.local.options import LocalOptions
from cloudddp.backends.local.outcome import conclude
from cloudddp.backends.local.rendezvous import ID_VARIABLE, LOOPBACK
from cloudddp.backends.local.rundir import RunDir, write_json_atomic
from cloudddp.backends.procs import Process
from cloudddp.backends.status import Cause, LogLine, RunState, RunStatus
from cloudddp.catalog.bill import Bill, Figure
from cloudddp.catalog.sizing import find_workload
from cloudddp.catalog.stepstore import StepStore
from cloudddp.code import requirements, stall
from cloudddp.code.keepfiles import left_behind_notice
from cloudddp.code.shim import RANK_LINE
from cloudddp.code.snapshot import snapshot_warnings
from cloudddp.errors import UserError
from cloudddp.observe.metrics import MetricRecord, record_from_dict
from cloudddp.observe.tail import follow_lines
from cloudddp.observe.units import human_bytes
from cloudddp.paths import home
from cloudddp.plan import Plan, late
from cloudddp.runtime import (
    Places,
    checked_snapshot,
    checkpoint_folder,
    extract,
    job_env,
    packed,
    snapshot_upload,
)
from cloudddp.runtime import program as runtime_program
from cloudddp.spec.model import JobSpec, is_shared_script, job_key
from cloudddp.spec.secrets import redacted_spec_data

RUN_DIR, PORT, PYTHON = late("RUN_DIR"), late("PORT"), late("PYTHON")
CANCEL_GRACE_SECONDS = float(os.environ.get("CLOUDDDP_CANCEL_GRACE", "30"))
ADOPT_WAIT_SECONDS = 30.0
"""How long a cancel waits for a new supervisor to take over a run whose own one is gone, before it stops the
nodes itself (without the grace)."""
SUPERVISOR_LOST = "running (supervisor lost)"
RANK_TAG = "[rank${rank}]:"
"""torchrun's prefix of each worker's lines (``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE``): the global rank, which
torchrun alone knows (the rendezvous decides which node holds rank 0)."""


def _has_cuda_device() -> bool:
    """A cheap look for an NVIDIA device, without importing torch (render must stay light)."""
    return Path("/dev/nvidiactl").exists()


def checkpoint_dir(spec: JobSpec) -> Path:
    """Checkpoints live per training (job name + what the script computes from), so a resubmitted job
    resumes where the last run stopped and a variant never loads another's checkpoint."""
    if spec.checkpoint.path and "://" in spec.checkpoint.path:
        raise UserError(
            f"checkpoint.path: {spec.checkpoint.path} is remote; the local backend writes local folders",
            hint="give a folder (relative to the spec file), or leave checkpoint.path out",
        )
    return (spec.base_dir / checkpoint_folder(spec, str(home() / "checkpoints"))).resolve()


def new_run_id(name: str) -> str:
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{_random.token_hex(2)}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def parse_rank_line(line: str, node: int, nodes: int) -> LogLine:
    """torchrun's ``--tee`` prefixes each worker line with its global rank (:data:`RANK_TAG`); a line without it is
    torchrun's own (or cloudddp's), from outside the program."""
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
    def _render(self, spec: JobSpec) -> Plan:
        opts = self.options(spec)
        decisions: list[str] = []
        warnings: list[str] = []
        snapshot = checked_snapshot(spec)
        decisions.append(
            f"runs code snapshot {snapshot.sha256[:12]} ({len(snapshot.files)} files, "
            f"{human_bytes(snapshot.size)}) unpacked in the run folder: the bytes a cloud job gets"
        )
        warnings += snapshot_warnings(snapshot)
        use_cuda = opts.device == "cuda" or (
            opts.device == "auto" and spec.resources.gpus_per_node > 0 and _has_cuda_device()
        )
        device = "cuda" if use_cuda else "cpu"
        # Without the GPUs here, two processes still exercise every collective the job will run.
        nproc = (
            opts.processes_per_node
            or spec.resources.processes_per_node
            or (spec.resources.gpus_per_node if use_cuda else 2)
        )
        nnodes = opts.nodes
        pg_backend = spec.process_group_backend(on_gpu=use_cuda)
        if pg_backend == "nccl" and not use_cuda:
            pg_backend = "gloo"
            warnings.append("distribution.backend nccl needs CUDA; this machine has none, so gloo is used here")
        decisions.append(f"{nnodes} node(s) × {nproc} process(es) on {device}, process group {pg_backend}")
        estimate = _time_estimate(spec, device, nnodes, nproc)
        if estimate is not None:
            decisions.append(
                f"estimate: {estimate['training_s']:,.0f} s of training ({estimate['steps']:,.0f} steps "
                f"of {estimate['step_s']:.4g} s; step time from {estimate['step_basis']})"
            )
        if spec.resources.nodes > 1 and nnodes == 1:
            decisions.append(
                f"resources.nodes={spec.resources.nodes} is for the cloud; here 1 node "
                "(set local.nodes to run several torchrun nodes on this machine)"
            )
        cores = os.cpu_count() or 1
        if device == "cpu" and nproc * nnodes > cores:
            warnings.append(
                f"{nproc * nnodes} processes on {cores} CPU cores: oversubscribed ranks slow every collective; "
                "lower local.processes_per_node or local.nodes"
            )

        ckpt = checkpoint_dir(spec)
        places = Places(
            model_dir=f"{RUN_DIR}/outputs",
            tensorboard_dir=_local_output(spec, "tensorboard", f"{RUN_DIR}/tensorboard"),
            checkpoint_dir=str(ckpt),
            # resolved, not required to exist yet: the preflight check says when one is missing
            inputs={
                name: str((spec.base_dir / spec.input_location(name, self.name)).resolve()) for name in spec.inputs
            },
        )
        env, sources = job_env(spec, self.name, places, on_gpu=use_cuda, sigterm_grace=self.sigterm_grace)
        env["CLOUDDDP_DIST_BACKEND"] = pg_backend
        if spec.checkpoint.enabled:
            decisions.append(
                f"checkpoints in {ckpt}: {_resume_note(spec, ckpt)}; held by one run at a time ({LOCK_NOTE})"
            )
        decisions.append(_stall_note(spec))
        if device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
        run = runtime_program(spec, places)
        program = list(run.argv) if run.python else ["--no-python", *run.argv]
        reqs = requirements.of(spec)
        if reqs is not None:
            decisions.append(
                f"requirements ({len(reqs.lines)} from {reqs.source}): run in this Python if it has them, "
                f"else in an environment made for them ({home() / 'envs' / reqs.digest})"
            )
        if spec.limits.max_restarts:
            decisions.append(
                f"limits.max_restarts {spec.limits.max_restarts}: each restart of the processes starts with a store "
                "of its own (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1), so none reads the last attempt's addresses"
            )
        nodes = []
        for node in range(nnodes):
            argv = [
                PYTHON if reqs else sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                str(nnodes),
                "--nproc-per-node",
                str(nproc),
                "--rdzv-backend",
                "c10d",
                "--rdzv-endpoint",
                f"{LOOPBACK}:{PORT}",
                # no --rdzv-id: the supervisor passes a random one in PET_RDZV_ID, never in argv
                "--rdzv-conf",
                "is_host=0",  # the supervisor hosts the store, on loopback only
                "--max-restarts",
                str(spec.limits.max_restarts),
                "--log-dir",
                f"{RUN_DIR}/ranks/node{node}",
                "--tee",
                "3",
                *program,
            ]
            node_env = {
                "NODE_RANK": str(node),
                "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": RANK_TAG,
                **torchrun.restart_env(spec.limits.max_restarts),
            }
            nodes.append({"node_rank": node, "argv": argv, "env": node_env})
        request: dict[str, Any] = {
            "cwd": f"{RUN_DIR}/code",
            "device": device,
            "nnodes": nnodes,
            "nproc_per_node": nproc,
            "max_runtime": spec.limits.max_runtime,
            "stall_timeout": spec.stall_seconds,
            "rendezvous_port": PORT,
            "env": env,
            "nodes": nodes,
            "requirements": list(reqs.lines) if reqs else [],
            "own_script": not is_shared_script(spec),  # name the files it leaves in its working folder
            "keep_files": list(spec.checkpoint.files),  # linked into the checkpoint folder by the supervisor
        }
        return Plan(
            backend=self.name,
            job_name=spec.name,
            request=request,
            documents={"torchrun.sh": _shell_script(request, snapshot.path)},
            decisions=decisions,
            warnings=warnings,
            estimate=estimate,
            uploads=[snapshot_upload(spec, snapshot, f"{RUN_DIR}/code")],
            job=redacted_spec_data(spec),
            late=("RUN_DIR", "PORT", "RUN_ID", *(["PYTHON"] if reqs else [])),
            env_sources=sources,
        )

    def _preflight(self, plan: Plan) -> list[Check]:
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
        if req["device"] == "cuda":
            gpus = len(list(Path("/dev").glob("nvidia[0-9]*")))
            checks.append(
                Check(
                    "one GPU per process",
                    req["nproc_per_node"] <= gpus,
                    f"{req['nproc_per_node']} processes per node, {gpus} GPUs here",
                    fix="set local.processes_per_node to the number of GPUs",
                )
            )
        for name, value in req["env"].items():
            if name.startswith("CLOUDDDP_INPUT_"):
                checks.append(
                    Check(
                        f"input {name[15:].lower()} exists",
                        Path(value).exists(),
                        value,
                        fix="fix inputs.<name>.path (relative to the spec file)",
                    )
                )
        ckpt = req["env"].get("CLOUDDDP_CHECKPOINT_DIR")
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
    def _launch(self, plan: Plan, *, provision: bool, progress: Progress | None) -> Launched:
        run_id = new_run_id(plan.job_name)
        ckpt = plan.request["env"].get("CLOUDDDP_CHECKPOINT_DIR")
        folder_lock = FolderLock(Path(ckpt)) if ckpt else None
        if folder_lock is not None:  # before anything is made: a second copy of the training stops here
            me = Process.of(os.getpid())
            folder_lock.acquire(run_id, [me] if me else [])
        try:
            return self._start(plan, run_id, folder_lock, progress)
        except BaseException:
            if folder_lock is not None:
                folder_lock.release(run_id)
            raise

    def _start(self, plan: Plan, run_id: str, folder_lock: FolderLock | None, progress: Progress | None) -> Launched:
        run = RunDir.for_run(run_id)
        values = {"RUN_DIR": str(run.path), "PORT": str(free_port()), "RUN_ID": run_id}
        (run.path / "logs").mkdir(parents=True)
        (run.path / "outputs").mkdir()
        code = run.path / "code"  # where the plan's code upload goes: {RUN_DIR}/code
        for upload in plan.uploads:
            extract(packed(upload), code)  # the code snapshot, as a cloud job gets it
        if plan.request.get("own_script"):
            run.remember_code_files()
        if "PYTHON" in plan.late:
            reqs = requirements.Requirements(tuple(plan.request["requirements"]), "requirements", shipped=False)
            if progress:
                progress.step(f"checking the job's {len(reqs.lines)} requirements")
            values["PYTHON"], done = requirements.python_for(reqs, base=code, home=home())
            if progress:
                progress.step(done)
        bound = plan.bind(values)
        env = bound.reveal(bound.request["env"])  # real secret values: to the supervisor's stdin, never to disk
        secrets = bound.secret_values()
        if "CLOUDDDP_CHECKPOINT_DIR" in env:
            Path(env["CLOUDDDP_CHECKPOINT_DIR"]).mkdir(parents=True, exist_ok=True)
        write_json_atomic(run.plan, bound.to_dict())
        (run.path / "spec.yaml").write_text(_yaml(plan.job))
        run.write_status(
            state=RunState.STARTING.value, name=plan.job_name, nodes=bound.request["nnodes"], created_at=time.time()
        )
        # The supervisor lock is taken here and handed down (an inherited descriptor), so the supervisor holds it
        # from its first instant: a supervisor started to adopt the run cannot slip in before it.
        lock = run.supervisor_lock()
        fcntl.flock(lock, fcntl.LOCK_EX)
        with open(run.path / "supervisor.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "cloudddp.backends.local.supervisor", str(run.path)],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=bound.request["cwd"],
                start_new_session=True,
                umask=0o077,  # what it and its children write is private to this user
                pass_fds=(lock,),
            )
        os.close(lock)  # the lock stays with the supervisor's copy of the descriptor
        # The supervisor waits for its stdin to close before it touches status.json, so this write
        # cannot race with its own.
        started = Process.of(proc.pid)  # with its start time: cancel signals this process, never a reused pid
        run.write_status(supervisor_pid=proc.pid, supervisor=started.record() if started else None)
        if folder_lock is not None and started is not None:
            folder_lock.hand_over(run_id, [started])  # then the supervisor adds the node groups
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({"env": env, "secrets": secrets}).encode())
        proc.stdin.close()
        if progress:
            progress.step(f"started {run_id} (supervisor pid {proc.pid})")
        return Launched(run_id, {"run_dir": str(run.path)})

    # -- run verbs ---------------------------------------------------------------------------
    def _run(self, run_id: str) -> RunDir:
        return RunDir.for_run(run_id)

    def _describe(self, run_id: str) -> RunStatus | None:
        run = self._run(run_id)
        if not run.status_file.exists():
            return None
        st = run.read_status()
        state = RunState(st.get("state", "unknown"))
        message = st.get("message", "")
        cause = Cause(st["cause"]) if st.get("cause") else None
        supervisor = Process.from_record(st.get("supervisor_pid"), st.get("supervisor"))
        if not state.terminal and not (supervisor is not None and supervisor.alive()):
            # The supervisor is gone without writing an end state (killed -9, out of memory, machine rebooted):
            # the state follows the nodes, not the supervisor.
            nodes = recorded_nodes(run, st)
            if any([n.running() for n in nodes]):
                state, message = RunState.RUNNING, SUPERVISOR_LOST
            else:
                codes = [code if (code := n.exit_code()) is not None else LOST_CODE for n in nodes]
                state, message, extra = conclude(run, codes, "cancelled" if st.get("cancel_requested") else None)
                message += " (decided from what the nodes recorded: the run's supervisor is gone)"
                cause = Cause(extra["cause"]) if "cause" in extra else None
                st = {**st, **extra}
        elif not state.terminal and st.get("adopted_at"):
            at = time.strftime("%H:%M:%S", time.localtime(st["adopted_at"]))
            message = f"{state.value} (its supervisor was lost; a new one took over at {at})"
        details = {k: st[k] for k in ("exit_codes", "failure", "restarts") if k in st} | {"run_dir": str(run.path)}
        left = run.left_behind() if state.terminal else []
        if left:
            details["left_behind"] = left
            message += "; " + left_behind_notice(left)
        return RunStatus(
            run_id=run_id,
            backend=self.name,
            state=state,
            name=st.get("name", run_id.rsplit("-", 3)[0]),
            native_state=st.get("state", ""),
            message=message,
            created_at=st.get("created_at"),
            ended_at=st.get("ended_at"),
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
        st = run.read_status()
        req = json.loads(run.plan.read_text())["request"]
        device, nodes, procs = req["device"], int(req["nnodes"]), int(req["nproc_per_node"])
        final = self.status(run_id).state.terminal
        started, ended = st.get("started_at"), st.get("ended_at")
        until = ended if ended is not None else (None if final else time.time())
        ran = max(0.0, until - started) if started is not None and until is not None else 0.0
        figures = [
            Figure(
                "processes ran",
                round(ran, 3),
                "s",
                "status.json: started_at (torchrun started) → "
                + ("ended_at (the supervisor recorded the end)" if ended is not None else "now (running)"),
            ),
            Figure("nodes × processes", f"{nodes} × {procs}", "", "plan.json: torchrun agents on this machine"),
        ]
        notes = ["no price: this machine's cost is not in dollars"]
        hours: float | None
        if device == "cuda":
            hours, unit = ran * nodes * procs / 3600, "GPU-hours"
            figures.append(Figure("GPU-hours", round(hours, 6), "h", "wall time × processes (one GPU per process)"))
        else:
            cpu = st.get("cpu_s")
            hours, unit = None, "CPU-hours"
            if isinstance(cpu, (int, float)):
                hours = cpu / 3600
                figures.append(
                    Figure(
                        "CPU time",
                        round(cpu, 3),
                        "s",
                        "getrusage of the run's processes (user + system CPU time), recorded when the run ended",
                    )
                )
            else:
                figures.append(Figure("CPU time", None, "s", "known when the run ends"))
        return Bill(
            final=final,
            size=f"local:{device}",
            nodes=nodes,
            processes_per_node=procs,
            billed_s=ran,
            price_per_hour=None,
            cost=None,
            resource_hours=hours,
            resource_unit=unit,
            ran_s=ran,
            figures=tuple(figures),
            notes=tuple(notes),
        )

    def _adopt(self, run_id: str) -> bool:
        """A new supervisor (``supervisor --adopt``) for a run not recorded as ended whose supervisor is gone: it
        follows the nodes if they still train, and records how the run ended either way."""
        run = self._run(run_id)
        st = run.read_status()
        if not st or RunState(st.get("state", "unknown")).terminal or "supervisor" not in st:
            return False  # ended, or still being launched
        supervisor = Process.from_record(st.get("supervisor_pid"), st.get("supervisor"))
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
            supervisor = Process.from_record(st.get("supervisor_pid"), st.get("supervisor"))
            if supervisor is not None and supervisor.alive():
                return supervisor
            if RunState(st.get("state", "unknown")).terminal:
                return None
            time.sleep(0.1)
        return None

    def _cancel(self, run_id: str) -> None:
        run = self._run(run_id)
        st = run.read_status()
        run.write_status(cancel_requested=True)
        supervisor = Process.from_record(st.get("supervisor_pid"), st.get("supervisor"))
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
        nodes = [
            Process.from_record(pid, record)
            for pid, record in zip(st.get("node_pgids", []), st.get("node_processes", []), strict=False)
        ]
        store = Process.from_record(st.get("store_pid"), st.get("store"))
        for process in [*nodes, supervisor, store]:
            if process is not None:
                process.signal_group(signal.SIGKILL)
        if not RunState(run.read_status().get("state", "unknown")).terminal:
            run.write_status(state=RunState.CANCELLED.value, message="cancelled", ended_at=time.time())


LOCK_NOTE = f"a second copy of the training refuses to start while this one runs: {LOCK_NAME} in the folder"


def _stall_note(spec: JobSpec) -> str:
    seconds = spec.stall_seconds
    if seconds is None:
        return "stall watchdog off (limits.stall_timeout: off): a hung rank runs until limits.max_runtime"
    basis = "limits.stall_timeout" if spec.limits.stall_timeout is not None else "twice distribution.collective_timeout"
    return (
        f"stall watchdog: no line from any rank for {seconds} s ({basis}) fails the run as stalled, with every "
        f"rank's Python stack in the log, taken by {stall.mechanism()}"
    )


def recorded_nodes(run: RunDir, st: dict[str, Any]) -> list[Node]:
    """The run's node groups as recorded in ``status.json``."""
    records = zip(st.get("node_pgids", []), st.get("node_processes", []), strict=False)
    return [Node(i, Process.from_record(pid, record), run.exit_file(i)) for i, (pid, record) in enumerate(records)]


def _time_estimate(spec: JobSpec, device: str, nodes: int, procs: int) -> dict[str, Any] | None:
    """How long the training takes here, from a step time measured on an earlier run of this job at this shape,
    else ``resources.step_time``; None without either (the catalog's model is for cloud GPUs, not this machine)."""

    measured = StepStore().for_shape(job_key(spec), nodes, procs).get(f"local:{device}")
    if measured is None and spec.resources.step_time is None:
        return None

    workload = find_workload(spec).workload
    epochs = workload.epochs or None
    step = measured.step_time(epochs) if measured is not None else workload.step_time
    if step is None:
        return None
    steps = workload.steps or step.steps or workload.steps_for(nodes * procs)
    if steps is None:
        return None
    training = steps * step.seconds
    hours = training * nodes * procs / 3600 if device == "cuda" else None
    return {
        "step_s": step.seconds,
        "steps": steps,
        "training_s": training,
        "step_basis": step.basis,
        "price_per_hour": None,
        "total_cost": None,
        "gpu_hours": hours,
    }


def _local_output(spec: JobSpec, name: str, default: str) -> str:
    output = spec.outputs.get(name)
    if output is None or not output.path:
        return default
    if "://" in output.path:
        raise UserError(f"outputs.{name}.path: {output.path} is remote; the local backend writes local folders")
    return str((spec.base_dir / output.path).resolve())


def _resume_note(spec: JobSpec, folder: Path) -> str:
    if spec.checkpoint.resume == "never":
        return "starts from scratch (checkpoint.resume: never)"
    found = sorted(folder.glob("ckpt-*.pt.sha256")) if folder.is_dir() else []
    return (
        f"resumes from {found[-1].name.removesuffix('.sha256')}" if found else "no checkpoint yet: starts from scratch"
    )


def _yaml(data: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False)


def _shell_script(request: dict[str, Any], archive: Path) -> str:
    """The plan as a shell script a person could run by hand (secrets stay placeholders)."""
    code = shlex.quote(request["cwd"])
    lines = ["#!/usr/bin/env bash", f"mkdir -p {code} && tar xzf {shlex.quote(str(archive))} -C {code}", f"cd {code}"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in request["env"].items()]
    if request.get("keep_files"):  # the supervisor does this before torchrun starts
        lines.append(f"python -m cloudddp.code.keepfiles link {shlex.join(request['keep_files'])}")
    lines += [
        f"export {ID_VARIABLE}=$(python -c 'import secrets; print(secrets.token_hex(16))')",
        f"python -m cloudddp.backends.local.store {shlex.quote(str(request['rendezvous_port']))} &"
        "  # the rendezvous store, on 127.0.0.1 only",
    ]
    for node in request["nodes"]:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in node["env"].items())
        amp = " &" if len(request["nodes"]) > 1 else ""
        lines.append(f"{env} {shlex.join(node['argv'])}{amp}")
    if len(request["nodes"]) > 1:
        lines.append("wait")
    return "\n".join(lines) + "\n"


__all__ = ["LocalBackend", "LocalOptions"]
