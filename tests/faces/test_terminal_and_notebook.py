"""The terminal and notebook experience: plots, the live table under tmux, notebook reprs, init, --json."""

from __future__ import annotations

import contextlib
import json
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.observe.live import sparkline
from tests.support.cli import FIXTURES, ROOT, cli
from tests.support.rigs import rig_unavailable

TINY = FIXTURES / "tinyjob" / "job.yaml"


def test_sparkline_scales_to_the_range() -> None:
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█"
    assert sparkline([5, 5, 5]) == "▁▁▁" and sparkline([]) == ""


def test_plan_shows_itself_in_a_notebook() -> None:
    plan = Job.load(ROOT / "jobs" / "cifar10-azureml.yaml").render("azureml")
    md, html = plan._repr_markdown_(), plan._repr_html_()
    assert "```yaml" in md and "distribution:" in md and "InfiniBand presets" in md
    assert "<pre>" in html and "job.yml" in html and "&lt;" not in plan.job_name


def test_init_writes_a_spec_that_validates_and_refuses_to_overwrite(tmp_path: Path) -> None:
    result = cli("init", str(tmp_path / "proj"), "--with-script")
    assert result.returncode == 0, result.stderr
    spec = tmp_path / "proj" / "job.yaml"
    assert spec.read_text().startswith("# yaml-language-server: $schema=job.schema.json")
    assert (tmp_path / "proj" / "src_train" / "train.py").is_file()
    assert cli("validate", str(spec)).returncode == 0
    again = cli("init", str(tmp_path / "proj"))
    assert again.returncode == 2 and "--force" in again.stderr


@pytest.mark.slow
def test_metrics_plot_writes_a_png_with_labelled_axes(tmp_path: Path) -> None:
    run = Job.load(TINY, ["code.args=[--epochs, 3]"]).submit("local")
    run.wait(timeout=120, poll=0.2)
    out = tmp_path / "m.png"
    result = cli("metrics", run.run_id, "--plot", str(out))
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    fig = run.plot()
    labels = [(ax.get_xlabel(), ax.get_ylabel(), ax.get_legend() is not None) for ax in fig.axes]
    assert all(x.startswith("step") and y and legend for x, y, legend in labels), labels


@pytest.mark.slow
def test_every_data_command_speaks_json() -> None:
    run = Job.load(TINY, ["code.args=[--epochs, 1]"]).submit("local")
    run.wait(timeout=120, poll=0.2)
    for args in (
        ["status", run.run_id],
        ["list"],
        ["backends"],
        ["validate", str(TINY)],
        ["render", str(TINY)],
        ["doctor", str(TINY)],
        ["skus", "--gpus", "8"],
        ["submit", str(TINY), "--dry-run"],
    ):
        result = cli(*args, "--json")
        assert result.returncode == 0, (args, result.stderr)
        json.loads(result.stdout)
    for args in (["metrics", run.run_id], ["logs", run.run_id]):
        lines = cli(*args, "--json").stdout.splitlines()
        assert lines and all(json.loads(line) for line in lines)


class Screen:
    """A tmux session's screen: calling it reads the screen; ``type`` types a line into it."""

    def __init__(self, session: str) -> None:
        self.tmux = ["tmux", "-L", session]
        self.session = session

    def __call__(self) -> str:
        return subprocess.run(
            [*self.tmux, "capture-pane", "-p", "-t", self.session], capture_output=True, text=True
        ).stdout

    def type(self, line: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", self.session, line, "Enter"], check=True)


@contextlib.contextmanager
def terminal(home: Path, cloudddp_args: str, rows: int = 40, env: str = "") -> Iterator[Screen]:
    """``cloudddp <args>`` typed into a real terminal (a tmux server of its own, so no other session's
    environment leaks in), with this checkout, ``home`` and ``env`` (``NAME=value ...``); yields its screen."""
    if shutil.which("tmux") is None:
        rig_unavailable("tmux is not installed (make test installs it: apt-get install tmux)")
    screen = Screen(f"cloudddp-{uuid.uuid4().hex[:8]}")
    cmd = (
        f"cd {shlex.quote(str(ROOT))} && {env} CLOUDDDP_HOME={shlex.quote(str(home))} "
        f"PYTHONPATH={shlex.quote(str(ROOT))} {shlex.quote(sys.executable)} -m cloudddp {cloudddp_args}"
    )
    subprocess.run([*screen.tmux, "new-session", "-d", "-s", screen.session, "-x", "160", "-y", str(rows)], check=True)
    try:
        screen.type(cmd)
        yield screen
    finally:
        subprocess.run([*screen.tmux, "kill-server"])


def screen_until(screen: Screen, text: str, timeout: float = 60) -> str:
    """The screen once ``text`` is on it (or at the deadline)."""
    deadline = time.monotonic() + timeout
    shown = screen()
    while text not in shown and time.monotonic() < deadline:
        time.sleep(0.3)
        shown = screen()
    return shown


NO_AWS = "AWS_CONFIG_FILE=/nonexistent AWS_SHARED_CREDENTIALS_FILE=/nonexistent AWS_PROFILE= AWS_ACCESS_KEY_ID="
SAGEMAKER_OWN_SCRIPT = (
    f"submit {shlex.quote(str(FIXTURES / 'ownscript' / 'job.yaml'))} -b sagemaker -o sagemaker.region=us-east-1 "
    "-o sagemaker.role=arn:aws:iam::123456789012:role/r -o resources.gpus_per_node=1 -o resources.interconnect=any"
)


def test_a_cloud_submit_on_a_terminal_shows_the_price_and_waits_for_an_answer(cloudddp_home: Path) -> None:
    """A submit to SageMaker shows the size, $/h and the ceiling from limits.max_runtime (an own script has
    no estimate), then waits at Proceed? [Y/n]; 'n' sends nothing. With -y it goes on without asking."""
    with terminal(cloudddp_home, SAGEMAKER_OWN_SCRIPT + "; echo ENDED-$((1+1))", env=NO_AWS) as screen:
        shown = screen_until(screen, "Proceed? [Y/n]")
        assert "size: 2 × ml.g6.xlarge, $1.61*/h for all nodes" in shown, shown
        assert "at most $38.63*: limits.max_runtime 24.0 h" in shown and "resources.step_time" in shown, shown
        time.sleep(1.5)  # it waits: nothing after the question, no credentials asked for yet
        waiting = screen()
        assert "ENDED-2" not in waiting and "AWS credentials" not in waiting, waiting
        screen.type("n")
        done = screen_until(screen, "ENDED-2")
        assert "not submitted: nothing was sent" in done and "AWS credentials" not in done, done
    with terminal(cloudddp_home, SAGEMAKER_OWN_SCRIPT + " -y; echo ENDED-$((1+1))", env=NO_AWS) as screen:
        done = screen_until(screen, "ENDED-2")
        assert "size: 2 × ml.g6.xlarge" in done and "Proceed?" not in done, done
        assert "AWS credentials" in done, done  # past the question: the preflight ran


@pytest.mark.slow
def test_live_metrics_table_updates_in_a_real_terminal(cloudddp_home: Path) -> None:
    run = Job.load(TINY, ["code.args=[--epochs, 40, --sleep, 0.4]", "checkpoint.enabled=false"]).submit("local")
    next(run.metrics(follow=True))

    def epoch_on(text: str) -> int:
        for line in text.splitlines():
            if "— epoch " in line:
                return int(line.split("— epoch ")[1].split()[0])
        return -1

    try:
        with terminal(cloudddp_home, f"metrics {run.run_id} -f") as screen:
            deadline = time.monotonic() + 60
            first = screen()
            while epoch_on(first) < 0 and time.monotonic() < deadline:
                time.sleep(0.5)
                first = screen()
            assert epoch_on(first) > 0 and "sum_of_ranks" in first, first
            assert any(block in first for block in "▁▂▃▄▅▆▇█"), "a sparkline is drawn"
            deadline = time.monotonic() + 60  # the table follows: a later epoch appears on the same screen
            second = screen()
            while epoch_on(second) <= epoch_on(first) and time.monotonic() < deadline:
                time.sleep(0.5)
                second = screen()
            assert epoch_on(second) > epoch_on(first), (first, second)
    finally:
        run.cancel()


@pytest.mark.slow
def test_the_attached_views_epoch_bar_reaches_the_end_for_a_script_that_is_not_the_shared_one(
    cloudddp_home: Path,
) -> None:
    args = f"submit {shlex.quote(str(TINY))} -o 'code.args=[--epochs, 3, --sleep, 0.3]'; echo SUBMIT-$((1+1))-ENDED"
    with terminal(cloudddp_home, args, rows=50) as screen:
        deadline = time.monotonic() + 120
        text = screen()
        while "SUBMIT-2-ENDED" not in text and time.monotonic() < deadline:  # the typed line says $((1+1))
            time.sleep(0.5)
            text = screen()
        assert "succeeded" in text, text
        assert "3/3" in text, text  # the bar followed the script's own epochs to the end
