"""A payload the container's toolkit could not pass to a program (E2BIG) is refused at render, with exit 2.

The bound render uses is held against the installed training toolkit's own environment for the request, and
that environment is handed to a real program start on this machine's kernel.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cloudddp.backends.plugins import load_spec
from cloudddp.backends.sagemaker import SageMakerBackend
from cloudddp.backends.sagemaker.argsize import MAX_ARG_STRLEN, reserve, training_env_size
from cloudddp.errors import UserError
from tests.support.cli import ROOT, cli

JOB = ROOT / "jobs" / "cifar10-resnet18.yaml"
TOOLKIT_ENV = """
import json, sys
from sagemaker_training import environment
print(json.dumps(environment.Environment().to_env_vars()))
"""


def request(note: int, *overrides: str) -> dict[str, Any]:
    spec = load_spec(JOB, [f"code.args=[--note, {'x' * note}]", *overrides])
    found: dict[str, Any] = SageMakerBackend(token="t").render(spec).request
    return found


def toolkit_env(base: Path, req: dict[str, Any], hosts: int, channels: list[str]) -> dict[str, str]:
    """The environment sagemaker-training builds in the container for ``req`` (its hyperparameters as sent)."""
    config = base / "input" / "config"
    config.mkdir(parents=True)
    names = [f"algo-{i}" for i in range(1, hosts + 1)]
    files = {
        "hyperparameters.json": req["HyperParameters"],
        "resourceconfig.json": {
            "current_host": "algo-1",
            "hosts": names,
            "current_instance_type": req["ResourceConfig"]["InstanceType"],
            "network_interface_name": "eth0",
        },
        "inputdataconfig.json": {c: {"TrainingInputMode": "File"} for c in channels},
    }
    for name, data in files.items():
        (config / name).write_text(json.dumps(data))
    env = {**os.environ, "SAGEMAKER_BASE_DIR": str(base)}
    built = subprocess.run([sys.executable, "-c", TOOLKIT_ENV], env=env, capture_output=True, text=True, check=True)
    found: dict[str, str] = json.loads(built.stdout.splitlines()[-1])
    return found


def test_a_payload_over_max_arg_strlen_is_refused_at_render_with_exit_2(tmp_path: Path) -> None:
    refused = cli("render", str(JOB), "-b", "sagemaker", "-o", f"code.args=[--note, {'x' * 100_000}]")
    assert refused.returncode == 2, refused.stderr
    assert "MAX_ARG_STRLEN" in refused.stderr and "SM_TRAINING_ENV" in refused.stderr
    assert "code.args" in refused.stderr  # what to shorten


@pytest.mark.parametrize(("hosts", "channels"), [(1, 1), (2, 2), (64, 1)])
def test_the_bound_is_above_what_the_toolkit_builds_and_under_it_a_program_starts(
    tmp_path: Path, hosts: int, channels: int
) -> None:
    req = request(90_000, f"resources.nodes={hosts}")
    env = toolkit_env(tmp_path, req, hosts, [f"channel{i}" for i in range(channels)])
    longest = max(len(f"{k}={v}".encode()) + 1 for k, v in env.items())
    assert len(f"SM_TRAINING_ENV={env['SM_TRAINING_ENV']}".encode()) + 1 == longest
    assert longest <= training_env_size(req) <= MAX_ARG_STRLEN
    subprocess.run(["true"], env=env, check=True)  # the kernel starts a program with it


def test_above_the_limit_the_kernel_refuses_what_the_toolkit_would_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What render refuses is what Linux refuses: the toolkit's variables for a payload over the bound."""
    with pytest.raises(UserError):
        request(100_000)
    monkeypatch.setattr("cloudddp.backends.sagemaker.request.check_argument_size", lambda _r: None)
    req = request(100_000)  # rendered anyway (a unit test may stub a function)
    env = toolkit_env(tmp_path, req, 1, ["train"])
    with pytest.raises(OSError) as info:
        subprocess.run(["true"], env=env, check=True)
    assert info.value.errno == errno.E2BIG


def test_the_reserve_bounds_many_hosts_and_long_channel_names(tmp_path: Path) -> None:
    """What SM_TRAINING_ENV holds besides the hyperparameters, for 512 hosts and 20 channels of 64 characters."""
    req = request(10, "resources.nodes=512")
    channels = [f"{i:02d}" + "c" * 62 for i in range(20)]
    env = toolkit_env(tmp_path, req, 512, channels)
    hyper = {k: json.loads(v) for k, v in req["HyperParameters"].items()}
    assert len(env["SM_TRAINING_ENV"]) - len(json.dumps(hyper)) <= reserve(512, 20)
