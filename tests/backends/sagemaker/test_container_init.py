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
from cloudddp.code import shim

SHIM = Path(shim.__file__)


def test_a_stop_spares_the_entry_and_the_toolkit_and_reaches_everything_else() -> None:
    me = os.getpid()
    parents = {1: 0, me: 0, 10: me, 11: 10, 12: 11, 13: 12, 14: 1}  # entry 10, toolkit 11, torchrun 12, worker 13
    assert shim.stop_targets(10, parents) == [1, 12, 13, 14]


def test_the_init_passes_sigterm_to_its_child_and_returns_its_status() -> None:
    child = (
        "import signal, sys, time; signal.signal(15, lambda *a: sys.exit(7)); print('up', flush=True); time.sleep(60)"
    )
    init = subprocess.Popen(
        [sys.executable, str(SHIM), "--init", sys.executable, "-c", child], stdout=subprocess.PIPE, text=True
    )
    assert init.stdout is not None and init.stdout.readline().strip() == "up"
    sent = time.monotonic()
    init.send_signal(signal.SIGTERM)
    assert init.wait(timeout=10) == 7
    assert time.monotonic() - sent < 1.0


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
    assert entry["ContainerEntrypoint"][:2] == ["/bin/bash", "-c"]
    assert all(len(s) <= 256 for s in [*entry["ContainerEntrypoint"], *entry["ContainerArguments"]])
    assert entry["ContainerArguments"] == ["bash", "-m", "start_with_right_hostname.sh", "train"]
