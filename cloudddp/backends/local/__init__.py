"""The local backend: torchrun on this machine, supervised by a detached process.

``launch`` starts ``python -m cloudddp.backends.local.supervisor`` in a new session; the supervisor
starts one ``python -m torch.distributed.run`` per "node" (c10d rendezvous on 127.0.0.1), tees their
output into the run folder, enforces the runtime limit and records how the run ended. So ``status``,
``logs``, ``metrics`` and ``cancel`` work from any shell, after the submitting CLI has exited.
"""

from __future__ import annotations

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

import yaml

from ...errors import RunNotFound, UserError
from ...metrics import MetricRecord, record_from_dict
from ...plan import Plan
from ...registry import Registry, home
from ...secrets import redacted_spec_data, rendered_env, resolved_env
from ...spec import JobSpec
from ...tail import follow_lines
from ..base import Backend, Capabilities, Check, LogLine, Progress, RunState, RunStatus
from .rundir import RunDir, write_json_atomic

RUN_DIR = "{RUN_DIR}"
PORT = "{PORT}"
CANCEL_GRACE_SECONDS = float(os.environ.get("CLOUDDDP_CANCEL_GRACE", "30"))
_RANK_PREFIX = "[default"


def _has_cuda_device() -> bool:
    """A cheap look for an NVIDIA device, without importing torch (render must stay light)."""
    return Path("/dev/nvidiactl").exists()


def checkpoint_dir(spec: JobSpec) -> Path:
    """Checkpoints live per job name, so a resubmitted job resumes where the last run stopped."""
    if spec.checkpoint.path and "://" not in spec.checkpoint.path:
        return (spec.base_dir / spec.checkpoint.path).resolve()
    return home() / "checkpoints" / spec.name


def new_run_id(name: str) -> str:
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{_random.token_hex(2)}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_rank_line(line: str, node: int, nodes: int) -> LogLine:
    """torchrun's ``--tee`` prefixes each worker line with ``[default<local rank>]:``."""
    if line.startswith(_RANK_PREFIX):
        end = line.find("]:")
        local = line[len(_RANK_PREFIX):end]
        if end > 0 and local.isdigit():
            source = f"rank{local}" if nodes == 1 else f"node{node}/rank{local}"
            return LogLine(source, line[end + 2:])
    return LogLine(f"node{node}" if nodes > 1 else "torchrun", line)


class LocalBackend(Backend):
    name: ClassVar[str] = "local"
    description: ClassVar[str] = "torchrun on this machine (CPU or GPUs), multi-node simulated with N torchrun agents"
    capabilities: ClassVar[Capabilities] = Capabilities(
        spot=False,
        provision=False,
        unsupported={
            "remote inputs": "the local backend reads local folders only; copy s3:// or azureml:// data here first",
            "smddp": "the SageMaker data-parallel library runs only in SageMaker's containers",
            "spot": "there is no spot capacity on this machine; resources.spot is ignored",
        },
    )

    def __init__(self, registry: Registry | None = None) -> None:
        self.registry = registry or Registry()

    # -- render ------------------------------------------------------------------------------
    def render(self, spec: JobSpec) -> Plan:
        decisions: list[str] = []
        warnings: list[str] = []
        code_dir = spec.code_dir
        if not code_dir.is_dir():
            raise UserError(f"code.dir: {code_dir} is not a folder", hint="code.dir is relative to the spec file")
        if spec.code.entry and not (code_dir / spec.code.entry).is_file():
            raise UserError(f"code.entry: {spec.code.entry} is not a file in {code_dir}")
        if spec.distribution.backend == "smddp":
            raise UserError(
                "distribution.backend smddp runs only on SageMaker",
                hint="submit with --backend sagemaker, or use -o distribution.backend=auto here",
            )
        use_cuda = spec.local.device == "cuda" or (
            spec.local.device == "auto" and spec.resources.gpus_per_node > 0 and _has_cuda_device()
        )
        device = "cuda" if use_cuda else "cpu"
        nproc = spec.local.processes_per_node or (spec.resources.gpus_per_node if use_cuda else 2)
        nnodes = spec.local.nodes
        pg_backend = spec.process_group_backend(on_gpu=use_cuda)
        if pg_backend == "nccl" and not use_cuda:
            pg_backend = "gloo"
            warnings.append("distribution.backend nccl needs CUDA; this machine has none, so gloo is used here")
        decisions.append(f"{nnodes} node(s) × {nproc} process(es) on {device}, process group {pg_backend}")
        if spec.resources.nodes > 1 and nnodes == 1:
            decisions.append(
                f"resources.nodes={spec.resources.nodes} is for the cloud; here 1 node "
                "(set local.nodes to run several torchrun nodes on this machine)"
            )
        if spec.resources.spot:
            warnings.append(self.capabilities.unsupported["spot"])
        cores = os.cpu_count() or 1
        if device == "cpu" and nproc * nnodes > cores:
            warnings.append(
                f"{nproc * nnodes} processes on {cores} CPU cores: oversubscribed ranks slow every collective; "
                "lower local.processes_per_node or local.nodes"
            )

        script_args = list(spec.code.args)
        env = rendered_env(spec)
        for name, item in spec.inputs.items():
            if item.is_remote:
                raise UserError(
                    f"inputs.{name}: {item.path} is remote; {self.capabilities.unsupported['remote inputs']}"
                )
            path = str((spec.base_dir / item.path).resolve())
            env[f"CLOUDDDP_INPUT_{name.upper()}"] = path
            if item.arg:
                script_args += [item.arg, path]
        ckpt = checkpoint_dir(spec)
        env.update(
            {
                "PYTHONUNBUFFERED": "1",
                "CLOUDDDP_DIST_BACKEND": pg_backend,
                "CLOUDDDP_COLLECTIVE_TIMEOUT": str(spec.distribution.collective_timeout),
                "CLOUDDDP_OUTPUT_DIR": f"{RUN_DIR}/outputs",
                "CLOUDDDP_RESUME": spec.checkpoint.resume,
                "CLOUDDDP_CHECKPOINT_EVERY": str(spec.checkpoint.every_epochs if spec.checkpoint.enabled else 0),
            }
        )
        if spec.checkpoint.enabled:
            env["CLOUDDDP_CHECKPOINT_DIR"] = str(ckpt)
            decisions.append(f"checkpoints in {ckpt} (resume: {spec.checkpoint.resume})")
        if device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
        program = [spec.code.entry, *script_args] if spec.code.command is None else ["--no-python", *spec.code.command]
        nodes = []
        for node in range(nnodes):
            argv = [
                sys.executable, "-m", "torch.distributed.run",
                "--nnodes", str(nnodes),
                "--nproc-per-node", str(nproc),
                "--rdzv-backend", "c10d",
                "--rdzv-endpoint", f"127.0.0.1:{PORT}",
                "--rdzv-id", spec.name,
                "--rdzv-conf", f"is_host={int(node == 0)}",
                "--max-restarts", str(spec.limits.max_restarts),
                "--log-dir", f"{RUN_DIR}/ranks/node{node}",
                "--tee", "3",
                *program,
            ]
            nodes.append({"node_rank": node, "argv": argv, "env": {"NODE_RANK": str(node)}})
        request: dict[str, Any] = {
            "cwd": str(code_dir),
            "device": device,
            "nnodes": nnodes,
            "nproc_per_node": nproc,
            "max_runtime": spec.limits.max_runtime,
            "env": env,
            "nodes": nodes,
        }
        return Plan(
            backend=self.name,
            job_name=spec.name,
            request=request,
            documents={"torchrun.sh": _shell_script(request)},
            decisions=decisions,
            warnings=warnings,
            spec=spec,
        )

    def preflight(self, plan: Plan) -> list[Check]:
        req = plan.request
        checks = []
        torch_spec = importlib.util.find_spec("torch")
        checks.append(Check(
            "torch installed", torch_spec is not None,
            f"in {sys.executable}" if torch_spec else f"torch is not importable by {sys.executable}",
            fix="pip install 'cloudddp[train]' -c constraints.txt",
        ))
        if req["device"] == "cuda":
            gpus = len(list(Path("/dev").glob("nvidia[0-9]*")))
            checks.append(Check(
                "one GPU per process", req["nproc_per_node"] <= gpus,
                f"{req['nproc_per_node']} processes per node, {gpus} GPUs here",
                fix="set local.processes_per_node to the number of GPUs",
            ))
        for name, value in req["env"].items():
            if name.startswith("CLOUDDDP_INPUT_"):
                checks.append(Check(f"input {name[15:].lower()} exists", Path(value).exists(), value,
                                    fix="fix inputs.<name>.path (relative to the spec file)"))
        ckpt = req["env"].get("CLOUDDDP_CHECKPOINT_DIR")
        if ckpt:
            parent = next((p for p in [Path(ckpt), *Path(ckpt).parents] if p.exists()), Path("/"))
            checks.append(Check("checkpoint folder writable", os.access(parent, os.W_OK), ckpt,
                                fix="set checkpoint.path to a writable folder"))
        return checks

    # -- launch ------------------------------------------------------------------------------
    def launch(self, plan: Plan, *, progress: Progress | None = None) -> str:
        spec = plan.spec
        if spec is None:
            raise UserError("this plan carries no spec; render it with LocalBackend.render(spec)")
        env = {**plan.request["env"], **resolved_env(spec)}  # real secret values: never written to disk
        run_id = new_run_id(plan.job_name)
        run = RunDir.for_run(run_id)
        (run.path / "logs").mkdir(parents=True)
        run.outputs.mkdir()
        if "CLOUDDDP_CHECKPOINT_DIR" in env:
            Path(env["CLOUDDDP_CHECKPOINT_DIR"]).mkdir(parents=True, exist_ok=True)
        concrete = _fill(plan.request, {RUN_DIR: str(run.path), PORT: str(free_port())})
        write_json_atomic(run.plan, {**plan.to_dict(), "request": concrete})
        (run.path / "spec.yaml").write_text(yaml.safe_dump(redacted_spec_data(spec), sort_keys=False))
        run.write_status(state=RunState.STARTING.value, nodes=concrete["nnodes"], created_at=time.time())
        self.registry.add(run_id, self.name, plan.job_name, RunState.STARTING.value, {"run_dir": str(run.path)})
        with open(run.path / "supervisor.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "cloudddp.backends.local.supervisor", str(run.path)],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                cwd=concrete["cwd"], start_new_session=True,
            )
        # The supervisor waits for its stdin to close before it touches status.json, so this write
        # cannot race with its own.
        run.write_status(supervisor_pid=proc.pid)
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({k: _fill(v, {RUN_DIR: str(run.path)}) for k, v in env.items()}).encode())
        proc.stdin.close()
        if progress:
            progress.step(f"started {run_id} (supervisor pid {proc.pid})")
        return run_id

    # -- run verbs ---------------------------------------------------------------------------
    def _run(self, run_id: str) -> RunDir:
        run = RunDir.for_run(run_id)
        if not run.status_file.exists():
            raise RunNotFound(f"no local run {run_id!r}", hint="`cloudddp list` shows the runs on this machine")
        return run

    def status(self, run_id: str) -> RunStatus:
        run = self._run(run_id)
        st = run.read_status()
        state = RunState(st.get("state", "unknown"))
        if not state.terminal and not _alive(st.get("supervisor_pid")):
            # The supervisor is gone without writing an end state (killed -9, machine rebooted).
            state = RunState.FAILED
            st = run.write_status(state=state.value, message="the run's supervisor exited unexpectedly", ended_at=time.time())
            self.registry.update(run_id, state=state.value)
        return RunStatus(
            run_id=run_id,
            backend=self.name,
            state=state,
            name=run_id.rsplit("-", 3)[0],
            native_state=st.get("state", ""),
            message=st.get("message", ""),
            created_at=st.get("created_at"),
            ended_at=st.get("ended_at"),
            details={k: st[k] for k in ("exit_codes", "failure", "run_dir", "restarts") if k in st}
            | {"run_dir": str(run.path)},
        )

    def _finished(self, run_id: str) -> bool:
        return self.status(run_id).state.terminal

    def logs(self, run_id: str, *, follow: bool = False) -> Iterator[LogLine]:
        run = self._run(run_id)
        paths = run.node_logs()
        for node, line in follow_lines(paths, follow=follow, finished=lambda: self._finished(run_id)):
            yield parse_rank_line(line, node, len(paths))

    def metrics(self, run_id: str, *, follow: bool = False) -> Iterator[MetricRecord]:
        run = self._run(run_id)
        for _, line in follow_lines([run.metrics], follow=follow, finished=lambda: self._finished(run_id)):
            try:
                record = record_from_dict(json.loads(line), "rank0")
            except ValueError:
                continue
            if record is not None:
                yield record

    def cancel(self, run_id: str) -> None:
        run = self._run(run_id)
        st = run.read_status()
        if RunState(st.get("state", "unknown")).terminal:
            return
        run.write_status(cancel_requested=True)
        pid = st.get("supervisor_pid")
        if _alive(pid):
            os.kill(pid, signal.SIGTERM)  # the supervisor stops the nodes, waits for checkpoints, records the end
            deadline = time.time() + CANCEL_GRACE_SECONDS + 10
            while time.time() < deadline and _alive(pid):
                time.sleep(0.1)
        # Whatever is left (a supervisor killed -9, a hung worker) goes now, process group by process group.
        for pgid in [*run.read_status().get("node_pgids", []), pid]:
            _killpg(pgid, signal.SIGKILL)
        st = run.read_status()
        if not RunState(st.get("state", "unknown")).terminal:
            run.write_status(state=RunState.CANCELLED.value, message="cancelled", ended_at=time.time())
        self.registry.update(run_id, state=run.read_status()["state"])


def _fill(value: Any, table: dict[str, str]) -> Any:
    if isinstance(value, str):
        for key, sub in table.items():
            value = value.replace(key, sub)
        return value
    if isinstance(value, list):
        return [_fill(v, table) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, table) for k, v in value.items()}
    return value


def _shell_script(request: dict[str, Any]) -> str:
    """The plan as a shell script a person could run by hand (secrets stay placeholders)."""
    lines = ["#!/usr/bin/env bash", f"cd {shlex.quote(request['cwd'])}"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in request["env"].items()]
    for node in request["nodes"]:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in node["env"].items())
        amp = " &" if len(request["nodes"]) > 1 else ""
        lines.append(f"{env} {shlex.join(node['argv'])}{amp}")
    if len(request["nodes"]) > 1:
        lines.append("wait")
    return "\n".join(lines) + "\n"


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)  # reap it if it is our own child
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _not_zombie(pid)


def _not_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _killpg(pgid: int | None, sig: int) -> None:
    if not pgid:
        return
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
