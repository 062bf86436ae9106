"""A stop under Open MPI (smddp, ``launcher: mpi`` on SageMaker): each rank hears it at once, from its launcher.

SageMaker's toolkit starts smddp and MPI jobs as ``mpirun <its options> [smddprun] python -m mpi4py
_cloudddp_launch.py ...`` with the container's environment (``process.check_error(..., env=os.environ)``; on the
other hosts its ``WorkerRunner`` writes that environment to /etc/environment for the sshd that starts ``orted``),
so the request's ``Environment`` would reach mpirun; none of its ``-mca`` options is ``odls_base_sigkill_timeout``.

But Open MPI's mpirun, on SIGTERM or when a rank fails, sends its ranks SIGCONT, waits ``odls_base_sigkill_timeout``,
only then SIGTERM, waits as long again and SIGKILLs them: signalled through mpirun a rank hears a stop only after that
timeout, and raising it to the grace makes every failed job hang twice the grace. So cloudddp leaves it alone and its
init signals the ranks themselves (:func:`cloudddp.injob.container_init.stop_targets`). Rehearsed here with this
machine's Open MPI (4.1, the DLCs' series), the mpirun command the installed toolkit builds (smddprun and ``-m
mpi4py`` left out: smddp is closed source and needs GPUs; eth0 is ``lo`` here), cloudddp's job environment, the real
rank launcher and a script with DataLoader workers whose save takes 5 s; the platform's SIGKILL comes ``GRACE`` s after
the stop.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cloudddp.injob import container_init
from cloudddp.injob.shim import SHIPPED_AS
from cloudddp.runtime import launcher_grace, shipped_files
from tests.support.dataloader_saver import ENTRY, RUNNING, WORKER_KILLED, dataloader_saver_code, saved, sigterms
from tests.support.ports import free_port

pytestmark = pytest.mark.slow

GRACE = 60  # seconds from the stop to the platform's SIGKILL, and what cloudddp tells the launchers (a 5 s save
# and the ranks' exit took over 20 s beside another copy of the suite)
SAVE_DELAY = 5.0
BUILD = """
import json, sys
from types import SimpleNamespace
from sagemaker_training.smdataparallel import SMDataParallelRunner
# the runner's own settings as cloudddp's request gives them (no custom options; eth0 is lo here)
runner = SimpleNamespace(
    _custom_mpi_options="", _network_interface_name="lo", _get_instance_type=lambda: "ml.p4d.24xlarge"
)
command = SMDataParallelRunner._get_mpirun_command(runner, 1, ["localhost"], "SMDATAPARALLEL_USE_SINGLENODE=1", 2)
print(json.dumps(command))
"""


def toolkit_mpirun(base: Path) -> list[str]:
    """The installed toolkit's own mpirun command for 2 processes on one host (without its ``LD_PRELOAD`` of a
    hostname shim that reads SageMaker's resource config)."""
    config = base / "input" / "config"
    config.mkdir(parents=True)
    (config / "resourceconfig.json").write_text(json.dumps({"current_host": "algo-1", "hosts": ["algo-1"]}))
    for name in ("hyperparameters.json", "inputdataconfig.json"):
        (config / name).write_text("{}")
    env = {**os.environ, "SAGEMAKER_BASE_DIR": str(base)}
    built = subprocess.run([sys.executable, "-c", BUILD], env=env, capture_output=True, text=True, check=True)
    argv: list[str] = json.loads(built.stdout.splitlines()[-1])
    at = next(i for i, a in enumerate(argv) if a.startswith("LD_PRELOAD="))
    return argv[: at - 1] + argv[at + 1 :]


def subtree(root: int) -> dict[int, tuple[int, str, list[str]]]:
    """The processes under ``root`` (others' jobs on this machine run rank launchers too)."""
    everything = container_init._processes()
    mine, grew = {root}, True
    while grew:
        below = {pid for pid, (parent, _n, _a) in everything.items() if parent in mine}
        grew = not below <= mine
        mine |= below
    return {pid: everything[pid] for pid in mine if pid in everything}


def stop(job: subprocess.Popen[bytes], log: Path) -> float:
    """Once the job trains, a stop as cloudddp's init sends it; returns when the job ended or the grace is over."""
    deadline = time.monotonic() + 120
    while RUNNING not in log.read_text(errors="replace"):
        assert job.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
        time.sleep(0.2)
    tree = subtree(job.pid)
    targets = container_init.stop_targets(job.pid, tree)
    assert len(targets) == 2 and all(container_init.is_rank(tree[pid][2]) for pid in targets), tree
    stopped = time.monotonic()
    for pid in targets:
        os.kill(pid, signal.SIGTERM)
    while job.poll() is None and time.monotonic() < stopped + GRACE:
        time.sleep(0.2)
    return stopped


def start(tmp_path: Path, code: Path, payload: dict[str, Any]) -> tuple[subprocess.Popen[bytes], Path]:
    """The toolkit's mpirun command, through /bin/sh as the toolkit up to 5.1.2 runs it, with 2 rank launchers running
    ``payload`` and the environment cloudddp gives every job (its launcher settings for ``GRACE``)."""
    for name, data in shipped_files().items():  # as every snapshot ships them
        (code / name).write_bytes(data)
    encoded = base64.b64encode(json.dumps(payload).encode()).decode()
    command = shlex.join([*toolkit_mpirun(tmp_path / "opt-ml"), sys.executable, SHIPPED_AS, "--cloudddp-00", encoded])
    env = {**os.environ, **launcher_grace(GRACE), "PYTHONUNBUFFERED": "1"}  # as the request's Environment has them
    log = tmp_path / "mpirun.log"
    with log.open("wb") as out:
        job = subprocess.Popen(
            ["/bin/sh", "-c", command], cwd=code, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return job, log


def end(job: subprocess.Popen[bytes]) -> None:
    """The platform's SIGKILL, to the whole container: Open MPI puts each rank in a process group of its own."""
    for pid in subtree(job.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    job.wait()


def test_each_mpi_rank_hears_a_stop_once_at_once_and_saves_within_the_grace(tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    argv = [ENTRY, "--steps", "100000", "--save-delay", str(SAVE_DELAY), "--step-time", "0.1"]
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "CLOUDDDP_CHECKPOINT_DIR": str(checkpoints)}
    job, log = start(tmp_path, dataloader_saver_code(tmp_path), {"argv": argv, "python": True, "env": env, "tag": True})
    try:
        stopped = stop(job, log)
    finally:
        end(job)
    text = log.read_text(errors="replace")
    print(f"\nmpirun ended {time.monotonic() - stopped:.1f} s after the stop, status {job.returncode}")
    assert sigterms(text) == {0: 1, 1: 1}, text[-3000:]
    assert not WORKER_KILLED.search(text), text[-3000:]
    assert len(saved(text)) == 1 and (checkpoints / "dataloader-saver.pt").is_file(), text[-3000:]
    assert job.returncode == 0, text[-3000:]  # the ranks ended by themselves, and mpirun as after any run


FAILS = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
if os.environ["RANK"] == "1":
    sys.exit(3)
time.sleep(600)
"""


def test_a_failed_rank_ends_an_mpi_job_in_seconds_not_after_the_grace(tmp_path: Path) -> None:
    """With ``odls_base_sigkill_timeout`` raised to the grace, mpirun would wait it before it SIGTERMs the others."""
    (tmp_path / "fails.py").write_text(FAILS)
    started = time.monotonic()
    job, log = start(tmp_path, tmp_path, {"argv": ["fails.py"], "python": True})
    try:
        job.wait(timeout=GRACE)
    except subprocess.TimeoutExpired:
        pass
    finally:
        end(job)
    print(f"\nmpirun ended {time.monotonic() - started:.1f} s after it started")
    assert job.returncode == 3, log.read_text(errors="replace")[-3000:]
