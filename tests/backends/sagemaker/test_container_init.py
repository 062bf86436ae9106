"""cloudddp's PID 1 on SageMaker and the shell-proof launcher payload, without a container."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cloudddp.backends.sagemaker.request import container_entrypoint, shim_hyperparameters, shim_payload
from cloudddp.injob import container_init, shim

INIT = Path(container_init.__file__)


LAUNCH = "/opt/ml/code/_cloudddp_launch.py --cloudddp-00 e30="
RANK = "python3 " + LAUNCH
MPI_RANK = "python3 -m mpi4py " + LAUNCH
TORCHRUN = {"TORCHELASTIC_RUN_ID"}
MPI = {"OMPI_COMM_WORLD_RANK"}


def _tree(*rows: tuple[int, int, str, str]) -> dict[int, tuple[int, str, list[str]]]:
    """pid, parent, command name, command line; this process is the init (under the image's entry, pid 10)."""
    return {pid: (parent, name, line.split(" ")) for pid, parent, name, line in rows}


def test_a_stop_goes_to_torchrun_once_never_to_the_ranks_their_programs_or_dataloader_workers() -> None:
    me = os.getpid()
    tree = _tree(
        (10, me, "bash", "bash -m start_with_right_hostname.sh train"),
        (11, 10, "train", "/usr/bin/python3 /usr/local/bin/train"),
        (12, 11, "sh", "/bin/sh -c torchrun --nnodes 1 ..."),  # the toolkit up to 5.1.2 runs it through a shell
        (13, 12, "torchrun", "/usr/bin/python3 /usr/local/bin/torchrun --nnodes 1 _cloudddp_launch.py ..."),
        (14, 13, "python3", RANK),
        (15, 13, "python3", RANK),
        (16, 14, "python3", "python3 train.py --epochs 3"),  # the program, in a group of its own
        (17, 16, "pt_data_worker", "python3 train.py --epochs 3"),  # its DataLoader worker
    )
    assert container_init.stop_targets(10, tree, names=lambda pid: TORCHRUN) == [13]


def test_under_open_mpi_each_host_stops_its_own_ranks_never_mpirun_which_would_delay_the_sigterm() -> None:
    """mpirun, on SIGTERM, waits odls_base_sigkill_timeout before it passes SIGTERM on (then SIGKILLs as long after):
    signalled directly, the ranks hear the stop at once, save and exit 0, and mpirun ends as after any run."""
    me = os.getpid()
    first = _tree((10, me, "bash", "bash"), (11, 10, "train", "train"), (12, 11, "mpirun", "mpirun -np 4 ..."))
    first |= _tree((13, 12, "smddprun", "/bin/bash smddprun python3"), (14, 13, "python3", MPI_RANK))
    first |= _tree((15, 12, "python3", MPI_RANK), (16, 15, "python3", "python3 -m mpi4py train.py"))
    assert container_init.stop_targets(10, first, names=lambda pid: MPI) == [14, 15]
    other = _tree((10, me, "bash", "bash"), (11, 10, "train", "train"), (20, 11, "sshd", "/usr/sbin/sshd -D"))
    other |= _tree((21, 20, "orted", "orted ..."), (22, 21, "python3", MPI_RANK))
    assert container_init.stop_targets(10, other, names=lambda pid: MPI) == [22]


def test_a_rank_without_a_launcher_is_stopped_itself_and_before_any_rank_everything_but_the_toolkit() -> None:
    me = os.getpid()
    tree = _tree((10, me, "bash", "bash"), (11, 10, "train", "train"), (12, 11, "python3", RANK))
    assert container_init.stop_targets(10, tree, names=lambda pid: set()) == [12]
    early = _tree((10, me, "bash", "bash"), (11, 10, "train", "train"), (12, 11, "pip", "pip install -r x"))
    assert container_init.stop_targets(10, early, names=lambda pid: set()) == [12]


def test_the_init_passes_sigterm_to_its_child_and_returns_its_status() -> None:
    child = (
        "import signal, sys, time; signal.signal(15, lambda *a: sys.exit(7)); print('up', flush=True); time.sleep(60)"
    )
    init = subprocess.Popen([sys.executable, str(INIT), sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    assert init.stdout is not None and init.stdout.readline().strip() == "up"
    sent = time.monotonic()
    init.send_signal(signal.SIGTERM)
    assert init.wait(timeout=30) == 7
    assert time.monotonic() - sent < 5.0  # at once (a loaded machine may take a moment to schedule either)


def test_the_init_knows_the_rank_launcher_by_its_shipped_name() -> None:
    assert container_init.RANK_LAUNCHER == shim.SHIPPED_AS


def test_the_payload_survives_a_shell_and_decodes_back() -> None:
    payload = {"argv": ["train.py", "it's", '{"a": 1}', "$HOME", "`id`"], "python": True, "env": {"A": "b c"}}
    hyper = shim_hyperparameters(payload)
    assert all(
        set(part) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") for part in hyper.values()
    )
    encoded = {k: json.dumps(v) for k, v in hyper.items()}
    assert shim_payload(encoded) == payload
    assert shim.read_payload([a for k, v in sorted(hyper.items()) for a in (f"--{k}", v)]) == payload


def test_a_long_payload_is_split_into_parts_within_the_hyperparameter_limit() -> None:
    payload = {"argv": ["train.py", *(f"--a{i}=" + "x" * 50 for i in range(200))], "python": True}
    hyper = shim_hyperparameters(payload)
    assert len(hyper) > 1 and all(len(json.dumps(v)) <= 2500 for v in hyper.values())
    assert shim_payload({k: json.dumps(v) for k, v in hyper.items()}) == payload


def test_the_entrypoint_fits_sagemakers_limits_and_runs_the_images_entry() -> None:
    entry = container_entrypoint()
    assert entry["ContainerEntrypoint"][:2] == ["/bin/sh", "-c"]  # no bash needed
    assert all(len(s) <= 256 for s in [*entry["ContainerEntrypoint"], *entry["ContainerArguments"]])
    assert entry["ContainerArguments"] == ["bash", "-m", "start_with_right_hostname.sh", "train"]


def test_the_init_gives_its_child_a_clean_signal_mask_whatever_it_inherited() -> None:
    """Started with SIGTERM blocked (a parent's mask survives exec), the init must still reach its child: the old
    init passed its mask on and the child never heard the stop (seen once in the full suite)."""
    child = (
        "import signal, sys, time; signal.signal(15, lambda *a: sys.exit(7)); print('up', flush=True); time.sleep(60)"
    )
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # the init inherits this thread's mask
    try:
        init = subprocess.Popen(
            [sys.executable, str(INIT), sys.executable, "-c", child], stdout=subprocess.PIPE, text=True
        )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
    assert init.stdout is not None and init.stdout.readline().strip() == "up"
    init.send_signal(signal.SIGTERM)
    assert init.wait(timeout=30) == 7
