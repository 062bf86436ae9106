"""cloudddp's own start of a SageMaker job, for an image without the AWS PyTorch DLC's entry.

Shipped inside every code snapshot as ``_cloudddp_start.py``. cloudddp's init (:mod:`cloudddp.injob.container_init`,
the container's PID 1) runs the image's own entry when the image has it (``bash -m start_with_right_hostname.sh
train``: the DLCs, whose training toolkit starts torchrun or smddp). Any other image (one built with
``pip install sagemaker-training``, whose toolkit alone would start one process per host and no torchrun, or a plain
Python image with torch) gets this file instead, as SDK v3's ModelTrainer brings its own driver: it does what the
toolkit does for a torchrun job, from what SageMaker puts in every container::

    python _cloudddp_start.py

- unpacks the code channel's ``sourcedir.tar.gz`` (``sagemaker_submit_directory``) into ``/opt/ml/code``;
- installs its ``requirements.txt`` with ``python -m pip`` when there is one;
- execs ``python -m torch.distributed.run`` there with the toolkit's own arguments: ``--nnodes N --nproc_per_node
  P`` and, on more than one host, ``--master_addr <first host> --master_port 7777 --node_rank i`` (hosts sorted,
  from ``input/config/resourceconfig.json``; P is ``sagemaker_mpi_num_of_processes_per_host``), running
  ``sagemaker_program`` (the rank launcher) with the ``--cloudddp-NN`` parts of ``hyperparameters.json``.

The image needs Python 3 with torch, nothing else (no bash, tar or toolkit). smddp and ``launcher: mpi`` need the
toolkit's mpirun and the library of an official image: refused here, by name. ``SAGEMAKER_BASE_DIR`` moves
``/opt/ml``, as it does for the toolkit. It needs nothing but Python's standard library.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

SHIPPED_AS = "_cloudddp_start.py"
MASTER_PORT = "7777"
"""The toolkit's rendezvous port on the first host."""
STARTING = "cloudddp: the image has no DLC entry; cloudddp starts the job itself:"
"""The line before the command this file runs (the toolkit logs its own command the same way)."""
NEEDS_TOOLKIT = ("sagemaker_distributed_dataparallel_enabled", "sagemaker_mpi_enabled")


def base() -> Path:
    return Path(os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml"))


def hyperparameters(folder: Path) -> dict[str, Any]:
    """The request's hyperparameters, each value decoded as the toolkit decodes it (JSON, else the string)."""
    raw: dict[str, str] = json.loads((folder / "input" / "config" / "hyperparameters.json").read_text())
    decoded = {}
    for key, value in raw.items():
        try:
            decoded[key] = json.loads(value)
        except ValueError:
            decoded[key] = value
    return decoded


def torchrun(python: str, hyper: dict[str, Any], resources: dict[str, Any]) -> list[str]:
    """The torchrun command the toolkit would run for this host, with the rank launcher and its payload."""
    hosts = sorted(resources["hosts"])
    processes = int(hyper.get("sagemaker_mpi_num_of_processes_per_host", 1))
    argv = [python, "-m", "torch.distributed.run", "--nnodes", str(len(hosts)), "--nproc_per_node", str(processes)]
    if len(hosts) > 1:
        rank = str(hosts.index(resources["current_host"]))
        argv += ["--master_addr", hosts[0], "--master_port", MASTER_PORT, "--node_rank", rank]
    parts = sorted(key for key in hyper if key.startswith("cloudddp-"))
    return [*argv, str(hyper["sagemaker_program"]), *(a for key in parts for a in (f"--{key}", str(hyper[key])))]


def unpack(archive: Path, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.12+, and the patch releases that added extraction filters
            tar.extractall(folder, filter="data")
        else:
            tar.extractall(folder)  # cloudddp's own snapshot, packed by cloudddp


def main() -> None:
    folder = base()
    hyper = hyperparameters(folder)
    needs = [key for key in NEEDS_TOOLKIT if hyper.get(key) is True]
    if needs:
        raise SystemExit(
            f"{SHIPPED_AS}: {needs[0]}: smddp and distribution.launcher mpi need the image's SageMaker training "
            "toolkit and its DLC entry (start_with_right_hostname.sh): use an official PyTorch training image"
        )
    code = folder / "code"
    unpack(Path(str(hyper["sagemaker_submit_directory"])), code)
    python = sys.executable
    if (code / "requirements.txt").is_file():
        subprocess.run([python, "-m", "pip", "install", "-r", "requirements.txt"], cwd=code, check=True)
    resources = json.loads((folder / "input" / "config" / "resourceconfig.json").read_text())
    argv = torchrun(python, hyper, resources)
    print(f"{STARTING}\n{shlex.join(argv)}", flush=True)
    os.chdir(code)
    os.execv(python, argv)


if __name__ == "__main__":
    main()
