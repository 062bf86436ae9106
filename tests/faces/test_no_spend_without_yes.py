"""Nothing paid without a yes: a cloud submit where nobody can answer ``Proceed?`` (``--quiet`` or ``--json`` on a
terminal, stdin not a terminal) and no ``-y`` exits 2, says how, and sends nothing to the AWS emulator; the same
submit with ``-y`` creates the job."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.aws_emulator import FaultProxy, aws_environment, own_bucket
from tests.support.cli import ROOT

pytestmark = pytest.mark.slow


def job(tmp_path: Path) -> Path:
    data = {
        "name": "no-yes",
        "code": {"dir": str(ROOT / "src_train"), "entry": "train.py", "args": ["--dataset", "synthetic"]},
        "resources": {"nodes": 1, "gpus_per_node": 1},
        "sagemaker": {
            "region": "us-east-1",
            "role": "arn:aws:iam::123456789012:role/SageMakerRole",
            "bucket": own_bucket(tmp_path),
            "image": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.4-gpu-py311",
        },
    }
    path = tmp_path / "job.json"
    path.write_text(json.dumps(data))  # JSON is YAML
    return path


def on_a_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """``python -m cloudddp ARGS`` with stdin, stdout and stderr on a pseudo-terminal: its exit status and screen."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cloudddp", *args], stdin=follower, stdout=follower, stderr=follower, cwd=ROOT, env=env
    )
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed: the process ended
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    return proc.wait(timeout=120), shown.decode(errors="replace")


def piped(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """The same with stdin a pipe (answering ``y``, which nobody asked for) and the output captured."""
    done = subprocess.run(
        [sys.executable, "-m", "cloudddp", *args], input="y\n", capture_output=True, text=True, cwd=ROOT, env=env
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("how", "flags"), [(on_a_terminal, ["--quiet"]), (on_a_terminal, ["--json"]), (piped, []), (piped, ["--quiet"])]
)
def test_a_sagemaker_submit_nobody_can_answer_needs_yes_and_sends_nothing(
    tmp_path: Path, moto_url: str, how: object, flags: list[str]
) -> None:
    proxy = FaultProxy(moto_url)
    with proxy.running() as url:
        env = {**os.environ, **aws_environment(url), "COLUMNS": "200"}
        env.pop("AWS_PROFILE", None)
        args = ["submit", str(job(tmp_path)), "-b", "sagemaker", "--detach", *flags]
        assert callable(how)
        code, shown = how(args, env)
        assert code == 2, shown
        assert "nothing was sent" in shown and "-y (--yes)" in shown and "Traceback" not in shown, shown
        assert proxy.sent == [], proxy.seen  # no CreateTrainingJob, nor anything before it
        code, shown = how([*args, "-y"], env)  # with a yes the same submit is sent
        assert code == 0, shown
        assert proxy.seen.get("CreateTrainingJob") == 1, proxy.seen
