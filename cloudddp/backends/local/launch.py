"""Launching a local plan: the run folder, the binding of its late values, and the detached supervisor.

The checkpoint folder is held first (:mod:`cloudddp.backends.folderlock`), so a second copy of the training stops
before anything is made; then the run folder is filled, the plan bound and written, and the supervisor started in a
session of its own with the job's real environment on its stdin (never on disk).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets as _random
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cloudddp.backends.base import Launched, Progress
from cloudddp.backends.checkpoints import contents
from cloudddp.backends.folderlock import FolderLock
from cloudddp.backends.local.rendezvous import listening_socket
from cloudddp.backends.local.request import LocalRequest
from cloudddp.backends.local.rundir import RunDir, write_json_atomic
from cloudddp.backends.procs import Process
from cloudddp.backends.status import RunState
from cloudddp.code import requirements
from cloudddp.code.snapshot import extract
from cloudddp.paths import home
from cloudddp.plan import Plan
from cloudddp.runtime import packed


def new_run_id(name: str) -> str:
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{_random.token_hex(2)}"


def launch(plan: Plan[LocalRequest], progress: Progress | None) -> Launched:
    run_id = new_run_id(plan.job_name)
    ckpt = plan.request.env.get("CLOUDDDP_CHECKPOINT_DIR")
    folder_lock = FolderLock(Path(ckpt)) if ckpt else None
    if folder_lock is not None:  # before anything is made: a second copy of the training stops here
        me = Process.of(os.getpid())
        folder_lock.acquire(run_id, [me] if me else [])
    try:
        return _start(plan, run_id, folder_lock, progress)
    except BaseException:
        if folder_lock is not None:
            folder_lock.release(run_id)
        raise


def _start(
    plan: Plan[LocalRequest], run_id: str, folder_lock: FolderLock | None, progress: Progress | None
) -> Launched:
    run = RunDir.for_run(run_id)
    # The store's socket is bound here, before its port is written anywhere, and handed down as a descriptor: no
    # other process can take the port first (rendezvous.py).
    with listening_socket() as store_socket:
        return _bind_and_start(plan, run, store_socket, folder_lock, progress)


def _bind_and_start(
    plan: Plan[LocalRequest],
    run: RunDir,
    store_socket: socket.socket,
    folder_lock: FolderLock | None,
    progress: Progress | None,
) -> Launched:
    run_id = run.run_id
    values = {"RUN_DIR": str(run.path), "PORT": str(store_socket.getsockname()[1]), "RUN_ID": run_id}
    values |= _prepare(run, plan, progress)
    bound = plan.bind(values)
    env = bound.reveal(bound.request.env)  # real secret values: to the supervisor's stdin, never to disk
    secrets = bound.secret_values()
    if "CLOUDDDP_CHECKPOINT_DIR" in env:
        Path(env["CLOUDDDP_CHECKPOINT_DIR"]).mkdir(parents=True, exist_ok=True)
        contents.record_run(Path(env["CLOUDDDP_CHECKPOINT_DIR"]), run_id, plan.request.arguments)
    write_json_atomic(run.plan, bound.to_dict())
    (run.path / "spec.yaml").write_text(_yaml(plan.job))
    run.write_status(
        state=RunState.STARTING.value, name=plan.job_name, nodes=bound.request.nnodes, created_at=time.time()
    )
    proc = _start_supervisor(run, bound.request, store_socket.fileno())
    # The supervisor waits for its stdin to close before it touches status.json, so this write
    # cannot race with its own.
    started = Process.of(proc.pid)  # with its start time: cancel signals this process, never a reused pid
    run.write_status(supervisor_pid=proc.pid, supervisor=started.record() if started else None)
    if folder_lock is not None and started is not None:
        folder_lock.hand_over(run_id, [started])  # then the supervisor adds the node groups
    assert proc.stdin is not None
    given = {"env": env, "secrets": secrets, "store_fd": store_socket.fileno()}
    proc.stdin.write(json.dumps(given).encode())
    proc.stdin.close()
    if progress:
        progress.step(f"started {run_id} (supervisor pid {proc.pid})")
    return Launched(run_id, {"run_dir": str(run.path)})


def _prepare(run: RunDir, plan: Plan[LocalRequest], progress: Progress | None) -> dict[str, str]:
    """The run folder with the code snapshot unpacked, as a cloud job gets it; the Python that has the job's
    requirements, where it has some (the value of ``{PYTHON}``)."""
    (run.path / "logs").mkdir(parents=True)
    (run.path / "outputs").mkdir()
    code = _working_folder(run, plan.request.env.get("CLOUDDDP_CHECKPOINT_DIR"))
    for upload in plan.uploads:
        extract(packed(upload), code)  # the code snapshot, as a cloud job gets it
    if plan.request.own_script:
        run.remember_code_files()
    if "PYTHON" not in plan.late:
        return {}
    reqs = requirements.Requirements(plan.request.requirements, "requirements", shipped=False)
    if progress:
        progress.step(f"checking the job's {len(reqs.lines)} requirements")
    python, done = requirements.python_for(reqs, base=code, home=home())
    if progress:
        progress.step(done)
    return {"PYTHON": python}


def _working_folder(run: RunDir, checkpoints: str | None) -> Path:
    """Where the plan's code upload goes, ``{RUN_DIR}/code``, and where the program runs. A training with a checkpoint
    folder runs in the same physical folder every time (``$CLOUDDDP_HOME/work/<digest of the checkpoint folder>``,
    emptied and unpacked afresh, reached through ``{RUN_DIR}/code``): frameworks record absolute paths in their
    checkpoints (Lightning's ModelCheckpoint ``dirpath`` under ``os.getcwd()``), and a resumed run that saw another
    folder would not restore them (Lightning names its next ``last.ckpt`` ``last-v1.ckpt``). Only one run of a
    training holds its checkpoint folder at a time (its lock), so no two runs share the folder."""
    code = run.path / "code"
    if not checkpoints:
        return code
    same = home() / "work" / hashlib.sha256(checkpoints.encode()).hexdigest()[:16]
    if same.is_dir() and not same.is_symlink():
        shutil.rmtree(same)  # what the last run wrote beside its code is discarded with it, as in a fresh folder
    same.mkdir(parents=True, mode=0o700)
    code.symlink_to(same, target_is_directory=True)
    return code


def _start_supervisor(run: RunDir, request: LocalRequest, store_fd: int) -> subprocess.Popen[bytes]:
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
            cwd=request.cwd,
            start_new_session=True,
            umask=0o077,  # what it and its children write is private to this user
            pass_fds=(lock, store_fd),
        )
    os.close(lock)  # the lock stays with the supervisor's copy of the descriptor
    return proc


def _yaml(data: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False)
