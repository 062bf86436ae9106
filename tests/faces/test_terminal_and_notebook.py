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
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.observe.live import sparkline
from tests.support.cli import FIXTURES, ROOT, cli

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


@contextlib.contextmanager
def terminal(home: Path, cloudddp_args: str, rows: int = 40) -> Iterator[Callable[[], str]]:
    """``cloudddp <args>`` typed into a real terminal (a tmux server of its own, so no other session's
    environment leaks in), with this checkout and ``home``; yields a function that reads the screen."""
    session = f"cloudddp-{uuid.uuid4().hex[:8]}"
    tmux = ["tmux", "-L", session]
    cmd = (
        f"cd {shlex.quote(str(ROOT))} && CLOUDDDP_HOME={shlex.quote(str(home))} "
        f"PYTHONPATH={shlex.quote(str(ROOT))} {shlex.quote(sys.executable)} -m cloudddp {cloudddp_args}"
    )
    subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "160", "-y", str(rows)], check=True)
    try:
        subprocess.run([*tmux, "send-keys", "-t", session, cmd, "Enter"], check=True)
        yield (
            lambda: subprocess.run([*tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout
        )
    finally:
        subprocess.run([*tmux, "kill-server"])


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)")
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
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)")
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
