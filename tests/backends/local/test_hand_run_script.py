"""The local plan's ``torchrun.sh``, run by hand as a person would (placeholders filled in): its rendezvous store
binds a port the kernel picks and says which (no port in the script for anyone to take first), the training runs,
and the store ends with the script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import FIXTURES, ROOT, cli

pytestmark = pytest.mark.slow


def test_the_hand_run_script_trains_on_a_port_nobody_knew_and_leaves_no_store(tmp_path: Path) -> None:
    rendered = cli("render", str(FIXTURES / "tinyjob" / "job.yaml"), "-b", "local", "-o", "code.args=[--epochs, '1']")
    assert rendered.returncode == 0, rendered.stderr
    script = rendered.stdout.split("# --- torchrun.sh\n", 1)[1].split("\n# --- ", 1)[0]
    assert "{PORT}" not in script and "--port 0" in script
    filled = script.replace("{RUN_DIR}", str(tmp_path / "run")).replace("{RUN_ID}", "by-hand")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    # The store inherits the script's stderr: had it outlived the script, this would wait until the timeout.
    done = subprocess.run(["bash", "-c", filled], capture_output=True, text=True, env=env, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "[rank1]:rank 1/2" in done.stdout, done.stdout[-2000:]
