"""smddp with a script of one's own: the rank launcher imports smddp's client in the script's process first.

Rehearsed with the request cloudddp renders for `cloudddp init`'s template (which calls
``init_process_group(os.environ["CLOUDDDP_DIST_BACKEND"])`` and imports nothing of smddp), the mpirun command
the installed toolkit builds for smddp (smddprun and ``-m mpi4py`` left out, as in test_mpirun_stop.py: smddp is
closed source and needs GPUs) and a stand-in ``smdistributed`` package whose client module registers an
``smddp`` backend (gloo underneath), as the real one registers its own when imported.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cloudddp.backends.plugins import spec_from_dict
from cloudddp.backends.sagemaker import SageMakerBackend
from cloudddp.backends.sagemaker.smddp import SMDDP_CLIENT
from cloudddp.injob.shim import SHIPPED_AS
from cloudddp.runtime import shipped_files
from tests.backends.sagemaker.test_mpirun_stop import toolkit_mpirun
from tests.backends.sagemaker.test_render import launcher_payload
from tests.support.cli import ROOT
from tests.support.ports import free_port

TEMPLATE = ROOT / "cloudddp" / "data" / "train_template.py"
REGISTERED = "stand-in smddp client imported: backend smddp registered"
STAND_IN = f"""
import torch.distributed as dist

def _create(store, rank, size, timeout):
    return dist.ProcessGroupGloo(store, rank, size, timeout)

dist.Backend.register_backend("smddp", _create, devices=["cpu"])
print("{REGISTERED}", flush=True)
"""


def smddp_job(code: Path, **code_section: Any) -> dict[str, Any]:
    return {
        "name": "own-smddp",
        "code": {"dir": str(code), "entry": "train.py", "args": ["--epochs", "2"], **code_section},
        "resources": {"nodes": 1, "gpus_per_node": 8},
        "distribution": {"backend": "smddp"},
        "sagemaker": {
            "region": "us-east-1",
            "role": "arn:aws:iam::123456789012:role/SageMakerRole",
            "bucket": "own-smddp-bucket",
            "instance_type": "ml.p4d.24xlarge",
            "image": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.4-gpu-py311",
        },
    }


def stand_in(folder: Path) -> Path:
    """A ``smdistributed`` package whose client module registers ``smddp`` when imported."""
    package = folder / Path(*SMDDP_CLIENT.split(".")[:-1])
    package.mkdir(parents=True)
    for level in range(1, len(SMDDP_CLIENT.split("."))):
        (folder / Path(*SMDDP_CLIENT.split(".")[:level]) / "__init__.py").write_text("")
    (package / "torch_smddp.py").write_text(STAND_IN)
    return folder


def own_script(folder: Path, text: str) -> Path:
    folder.mkdir()
    (folder / "train.py").write_text(text)
    return folder


def render(job: dict[str, Any]) -> Any:
    return SageMakerBackend(token="t").render(spec_from_dict(job))


@pytest.mark.slow
def test_an_own_script_gets_an_smddp_process_group_from_the_rendered_request(tmp_path: Path) -> None:
    code = own_script(tmp_path / "code", TEMPLATE.read_text())
    plan = render(smddp_job(code))
    assert not [w for w in plan.warnings if "smddp" in w], plan.warnings  # the template asks for the backend
    payload = launcher_payload(plan.request)
    assert payload["preload"] == [SMDDP_CLIENT] and payload["env"]["CLOUDDDP_DIST_BACKEND"] == "smddp"
    for name, data in shipped_files().items():  # as the snapshot ships them
        (code / name).write_bytes(data)
    here = {"CLOUDDDP_CHECKPOINT_DIR": str(tmp_path / "ckpt"), "CLOUDDDP_MODEL_DIR": str(tmp_path / "model")}
    payload["env"].update({**here, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())})
    encoded = base64.b64encode(json.dumps(payload).encode()).decode()
    command = [*toolkit_mpirun(tmp_path / "opt-ml"), sys.executable, SHIPPED_AS, "--cloudddp-00", encoded]
    env = {**os.environ, "PYTHONPATH": str(stand_in(tmp_path / "site")), "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        ["/bin/sh", "-c", shlex.join(command)], cwd=code, env=env, capture_output=True, text=True, timeout=240
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert out.count(REGISTERED) == 2, out[-4000:]  # each rank's own process imported the client
    assert (tmp_path / "model" / "model.pt").is_file(), out[-4000:]
    # SageMaker's chart of `loss` reads the template's lines (json.dumps, with a space after the colon).
    regex = next(m["Regex"] for m in plan.request["AlgorithmSpecification"]["MetricDefinitions"] if m["Name"] == "loss")
    charted = [float(m.group(1)) for line in out.splitlines() if (m := re.search(regex, line))]
    assert len(charted) == 2, out[-4000:]


def test_the_launcher_imports_the_preload_modules_in_the_scripts_own_process(tmp_path: Path) -> None:
    """The rank launcher as shipped: the script sees the module imported, its own argv and ``__main__``."""
    code = own_script(tmp_path / "code", "import sys\nprint('seen', 'first' in sys.modules, sys.argv, __name__)\n")
    (code / "first.py").write_text("")
    for name, data in shipped_files().items():
        (code / name).write_bytes(data)
    payload = {"argv": ["train.py", "--lr", "0.1"], "python": True, "preload": ["first"]}
    done = subprocess.run(
        [sys.executable, SHIPPED_AS, "--cloudddp-00", json.dumps(payload)],
        cwd=code,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "seen True ['train.py', '--lr', '0.1'] __main__" in done.stdout, done.stdout + done.stderr


def test_a_missing_smddp_library_is_named(tmp_path: Path) -> None:
    code = own_script(tmp_path / "code", "print('ran')\n")
    for name, data in shipped_files().items():
        (code / name).write_bytes(data)
    payload = {"argv": ["train.py"], "python": True, "preload": [SMDDP_CLIENT]}
    done = subprocess.run(
        [sys.executable, SHIPPED_AS, "--cloudddp-00", json.dumps(payload)], cwd=code, capture_output=True, text=True
    )
    assert done.returncode != 0 and "ran" not in done.stdout
    assert f"cannot import {SMDDP_CLIENT}" in done.stderr and "data-parallel library" in done.stderr


def test_render_warns_where_an_own_program_cannot_get_smddp(tmp_path: Path) -> None:
    nothing = own_script(tmp_path / "plain", "import torch.distributed as dist\ndist.init_process_group('nccl')\n")
    (warning,) = [w for w in render(smddp_job(nothing)).warnings if "smddp" in w]
    assert "names neither CLOUDDDP_DIST_BACKEND nor smddp" in warning
    command = smddp_job(nothing, command=["bash", "run.sh"])
    del command["code"]["entry"], command["code"]["args"]
    plan = render(command)
    assert any("with code.command" in w and SMDDP_CLIENT in w for w in plan.warnings), plan.warnings
    assert "preload" not in launcher_payload(plan.request)
