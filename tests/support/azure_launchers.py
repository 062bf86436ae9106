"""Azure ML's two launchers, run on this machine against a rendered command job (CLI v2 document).

What Azure ML does with a command job, and what this module does instead:

- The ``code`` folder is snapshotted and every node gets its own copy; the command runs there.
  Here: a copy per node under ``work/node<i>/code``.
- ``${{inputs.X}}`` / ``${{outputs.Y}}`` in ``command`` become mount paths. Inputs in ``download`` mode are
  copied to each node (a ``uri_file`` input as the file itself, whose path the command gets);
  ``ro_mount`` inputs and ``rw_mount`` outputs are one shared blob path seen by every node. An output
  without ``path`` goes to ``azureml://datastores/workspaceblobstore/paths/azureml/<job name>/<output>/``
  (Azure ML's default). Here: ``azureml://datastores/<store>/paths/...`` maps to a local folder per
  datastore, so two jobs that name the same path share it, as on Azure; a job of the rig's workspace
  (azure_nodes.py) has its outputs mirrored to the workspace's blobs on Azurite (azure_mounts.py).
- ``environment_variables`` are set for every process.
- ``distribution.type: pytorch`` (per-process launch, no torchrun): Azure ML starts
  ``process_count_per_instance`` processes on each of ``instance_count`` nodes itself, with MASTER_ADDR,
  MASTER_PORT (6105 on Azure; a free port here so parallel tests do not collide), WORLD_SIZE and NODE_RANK
  per node and RANK and LOCAL_RANK per process. LOCAL_WORLD_SIZE is not documented and not set.
  (Azure ML's "Distributed GPU training guide", SDK v1 and v2 pages.)
- ``distribution.type: mpi``: Azure ML runs ``mpirun`` itself with ``instance_count ×
  process_count_per_instance`` ranks; Open MPI sets OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE and
  Azure adds AZ_BATCHAI_MPI_MASTER_NODE (the head node's address; what Microsoft's own examples read on
  one node) and, on more than one node, AZ_BATCH_MASTER_NODE=``addr:port``. No MASTER_PORT. Here: a real
  Open MPI ``mpirun`` on this host (all ranks local, so OMPI_COMM_WORLD_LOCAL_SIZE is the world size).
- Each process's output is ``user_logs/std_log_process_<rank>.txt`` with the rank zero-padded to two digits
  (``std_log_process_00.txt``, as azure-ai-ml's ``test_job_ops_helper.py`` models the runtime's files), under
  either distribution (here too: ``log_name``); ``AzureRun.logs[rank]``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cloudddp.observe.metrics import MetricRecord, metrics_from_lines
from tests.support import watchdog
from tests.support.ports import free_port

_REFERENCE = re.compile(r"\$\{\{\s*(inputs|outputs)\.([A-Za-z0-9_]+)\s*\}\}")
_DATASTORE_URI = re.compile(r"^azureml://datastores/([^/]+)/paths/(.*)$")
SHARED_MODES = {"ro_mount", "rw_mount"}


def log_name(rank: int) -> str:
    """The file the runtime writes a process's output to: ``std_log_process_00.txt`` for rank 0."""
    return f"std_log_process_{rank:02d}.txt"


@dataclass
class AzureRun:
    """One emulated job: its processes' exit codes and logs, and where its inputs and outputs were."""

    job_name: str
    returncodes: dict[int, int]
    logs: dict[int, str]
    inputs: dict[str, Path]
    outputs: dict[str, Path]
    env: dict[int, dict[str, str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.returncodes) and all(code == 0 for code in self.returncodes.values())

    def metrics(self, rank: int = 0) -> list[MetricRecord]:
        return list(metrics_from_lines(self.logs.get(rank, "").splitlines()))

    def describe(self) -> str:
        """Exit codes and each log's tail, for assertion messages."""
        return "\n".join(
            f"--- rank {rank} exited {self.returncodes.get(rank)} ---\n{text[-3000:]}"
            for rank, text in sorted(self.logs.items())
        )


class Datastores:
    """``azureml://datastores/<name>/paths/<p>`` as ``root/<name>/<p>`` on this machine; an output's folder is
    that folder, made when missing (azure_mounts.py: one that mirrors the blobs of the rig's workspace)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @staticmethod
    def parts(uri: str) -> tuple[str, str]:
        """The datastore and the path (no slash at either end) a datastore URI names."""
        match = _DATASTORE_URI.match(uri)
        if not match:
            raise ValueError(f"not a datastore URI this emulation knows: {uri!r}")
        return match.group(1), match.group(2).strip("/")

    def folder(self, uri: str) -> Path:
        store, path = self.parts(uri)
        return self.root / store / path

    def output(self, uri: str) -> Path:
        """The folder a ``rw_mount`` output is mounted at, ready before the job's processes start."""
        folder = self.folder(uri)
        folder.mkdir(parents=True, exist_ok=True)
        return folder


def _run_ending_its_tree(
    argv: list[str], cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """``argv``; past ``timeout`` it and every process below it get SIGKILL (Open MPI starts its ranks in process
    groups of their own) and the result is exit 124."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for pid in watchdog.with_descendants({proc.pid}):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate()
        return subprocess.CompletedProcess(argv, 124, out, f"{err}\n[the rig ended the job after {timeout:.0f} s]")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def substitute(command: str, inputs: dict[str, Path], outputs: dict[str, Path]) -> str:
    """The command with ``${{inputs.X}}``/``${{outputs.Y}}`` replaced by paths; unknown references are errors."""

    def path_of(match: re.Match[str]) -> str:
        kind, name = match.groups()
        table = inputs if kind == "inputs" else outputs
        if name not in table:
            raise KeyError(f"the command refers to ${{{{{kind}.{name}}}}} but the job has no such {kind[:-1]}")
        return str(table[name])

    result = _REFERENCE.sub(path_of, command)
    if "${{" in result:
        raise ValueError(f"unresolved reference left in the command: {result!r}")
    return result


def _output_folders(job: dict[str, Any], stores: Datastores) -> dict[str, Path]:
    folders = {}
    for name, output in (job.get("outputs") or {}).items():
        if output.get("mode", "rw_mount") != "rw_mount":
            raise ValueError(f"outputs.{name}: mode {output.get('mode')!r} is not emulated (rw_mount is)")
        uri = output.get("path") or f"azureml://datastores/workspaceblobstore/paths/azureml/{job['name']}/{name}/"
        folders[name] = stores.output(uri)
    return folders


def _input_folders(job: dict[str, Any], stores: Datastores, node_dir: Path) -> dict[str, Path]:
    folders = {}
    for name, item in (job.get("inputs") or {}).items():
        path = item["path"]
        source = stores.folder(path) if path.startswith("azureml://") else Path(path)
        mode = item.get("mode", "ro_mount")
        is_file = item.get("type", "uri_folder") == "uri_file"
        if is_file != source.is_file():
            what = "file" if source.is_file() else "folder"
            raise ValueError(f"inputs.{name}: type {item.get('type')} but {source} is a {what}")
        if mode in SHARED_MODES:
            folders[name] = source
        elif mode == "download" and is_file:  # the file itself, downloaded: the input is its path
            folders[name] = node_dir / "inputs" / name / source.name
            folders[name].parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, folders[name])
        elif mode == "download":
            folders[name] = node_dir / "inputs" / name
            shutil.copytree(source, folders[name], dirs_exist_ok=True)
        else:
            raise ValueError(f"inputs.{name}: mode {mode!r} is not emulated (download, ro_mount are)")
    return folders


def _prepare_nodes(
    job: dict[str, Any], work: Path, stores: Datastores
) -> tuple[list[Path], list[str], dict[str, Path], dict[str, Path]]:
    """Per node: a copy of the code snapshot and the substituted command; plus node 0's inputs and the outputs."""
    outputs = _output_folders(job, stores)
    code_dirs, commands, per_node_inputs = [], [], []
    for node in range(int(job["resources"]["instance_count"])):
        node_dir = work / f"node{node}"
        code = node_dir / "code"
        shutil.copytree(job["code"], code, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), dirs_exist_ok=True)
        per_node_inputs.append(_input_folders(job, stores, node_dir))
        code_dirs.append(code)
        commands.append(substitute(job["command"], per_node_inputs[-1], outputs))
    return code_dirs, commands, per_node_inputs[0], outputs


def _base_env(job: dict[str, Any]) -> dict[str, str]:
    """This machine's environment as the image's: ``python`` is this interpreter, no GPUs, the job's variables."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK"}
    }
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["CUDA_VISIBLE_DEVICES"] = ""
    env.update({k: str(v) for k, v in (job.get("environment_variables") or {}).items()})
    return env


@dataclass
class Started:
    """A job started by :func:`start_pytorch`: its processes, running, each writing its own log file."""

    job_name: str
    procs: dict[int, subprocess.Popen[bytes]]
    envs: dict[int, dict[str, str]]
    logs_dir: Path
    inputs: dict[str, Path]
    outputs: dict[str, Path]

    def log_file(self, rank: int) -> Path:
        return self.logs_dir / log_name(rank)

    def ended(self) -> bool:
        """Every process has exited, or one has failed (which ends the job on Azure ML)."""
        polled = [p.poll() for p in self.procs.values()]  # every process polled, each round
        return None not in polled or any(polled)

    def wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.ended():
            time.sleep(0.1)

    def stop(self, grace: float = 0) -> None:
        """Kill every process still running, with its children, as a node that goes away does; with ``grace``,
        SIGTERM first and SIGKILL what still runs ``grace`` seconds later (a low-priority node's eviction
        notice)."""
        if grace:
            for proc in self.procs.values():
                if proc.poll() is None:
                    with suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and any(p.poll() is None for p in self.procs.values()):
                time.sleep(0.1)
        for proc in self.procs.values():
            if proc.poll() is None:
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def result(self) -> AzureRun:
        logs = {rank: self.log_file(rank).read_text(errors="replace") for rank in self.procs}
        codes = {rank: proc.returncode for rank, proc in self.procs.items()}
        return AzureRun(self.job_name, codes, logs, self.inputs, self.outputs, self.envs)


def start_pytorch(
    job: dict[str, Any], work: Path, stores: Datastores, platform_env: dict[str, str] | None = None
) -> Started:
    """Azure ML's PyTorch distribution, started: every process launched directly with the torch.distributed
    variables (and ``platform_env``, what the platform adds, e.g. MLFLOW_*); returns without waiting."""
    if job["distribution"]["type"] != "pytorch":
        raise ValueError(f"distribution.type is {job['distribution']['type']!r}, not pytorch")
    nodes = int(job["resources"]["instance_count"])
    per_node = int(job["distribution"].get("process_count_per_instance", 1))
    code_dirs, commands, inputs, outputs = _prepare_nodes(job, work, stores)
    base, port = {**_base_env(job), **(platform_env or {})}, free_port()
    started = Started(job["name"], {}, {}, work / "user_logs", inputs, outputs)
    started.logs_dir.mkdir(parents=True, exist_ok=True)
    try:
        for node in range(nodes):
            for local in range(per_node):
                rank = node * per_node + local
                started.envs[rank] = {
                    **base,
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(port),
                    "WORLD_SIZE": str(nodes * per_node),
                    "NODE_RANK": str(node),
                    "RANK": str(rank),
                    "LOCAL_RANK": str(local),
                }
                with open(started.log_file(rank), "wb") as log:
                    started.procs[rank] = subprocess.Popen(
                        ["bash", "-c", commands[node]],
                        cwd=code_dirs[node],
                        env=started.envs[rank],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                    )
    except BaseException:
        started.stop()
        raise
    return started


def launch_pytorch(job: dict[str, Any], work: Path, stores: Datastores, timeout: float = 300) -> AzureRun:
    """Azure ML's PyTorch distribution, run to its end. As on Azure ML, the first process that fails fails the
    job: the others are stopped."""
    started = start_pytorch(job, work, stores)
    try:
        started.wait(timeout)
    finally:
        started.stop()
    return started.result()


def mpirun_unavailable() -> str | None:
    if shutil.which("mpirun") is None:
        return "Open MPI's mpirun is not installed: `make system-deps` installs openmpi-bin"
    return None


def launch_mpi(job: dict[str, Any], work: Path, stores: Datastores, timeout: float = 240) -> AzureRun:
    """Azure ML's MPI distribution: one real ``mpirun`` starts every rank of the rendered command. After ``timeout``
    seconds (within pytest's 300) the job ends as a node that goes away does, every rank with it, and the run says
    so: SIGKILL to ``mpirun`` alone would leave its ranks running."""
    if job["distribution"]["type"] != "mpi":
        raise ValueError(f"distribution.type is {job['distribution']['type']!r}, not mpi")
    nodes = int(job["resources"]["instance_count"])
    ranks = nodes * int(job["distribution"].get("process_count_per_instance", 1))
    code_dirs, commands, inputs, outputs = _prepare_nodes(job, work, stores)
    env = {
        **_base_env(job),
        "AZ_BATCHAI_MPI_MASTER_NODE": "127.0.0.1",
        # mpirun refuses to start processes as root unless both are set.
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    }
    if nodes > 1:
        env["AZ_BATCH_MASTER_NODE"] = f"127.0.0.1:{free_port()}"
    logs_dir = work / "mpi-logs"
    argv = [
        "mpirun",
        "-np",
        str(ranks),
        "--oversubscribe",
        "--bind-to",
        "none",
        "--output-filename",
        str(logs_dir),
        "bash",
        "-c",
        commands[0],
    ]
    done = _run_ending_its_tree(argv, code_dirs[0], env, timeout)
    logs, codes = {}, {}
    for rank in range(ranks):
        folder = logs_dir / "1" / f"rank.{rank}"
        parts = [
            (folder / name).read_text(errors="replace") for name in ("stdout", "stderr") if (folder / name).exists()
        ]
        logs[rank] = "".join(parts)
        codes[rank] = done.returncode
    if done.returncode != 0:
        logs[0] = logs.get(0, "") + f"\n[mpirun exited {done.returncode}]\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    user_logs = work / "user_logs"  # each rank's output as the runtime names it, as under PyTorch
    user_logs.mkdir(parents=True, exist_ok=True)
    for rank, text in logs.items():
        (user_logs / log_name(rank)).write_text(text)
    return AzureRun(job["name"], codes, logs, inputs, outputs, {rank: env for rank in range(ranks)})
