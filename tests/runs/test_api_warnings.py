"""The Python API says what the command line says besides a run's state: ``Run.warnings`` holds its plan's
warnings and, once it has ended, what its end says of the checkpoint it resumed ("nothing left to train"); a run
shown in a notebook and ``run.watch()`` outside one print them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cloudddp.api import Job, Run
from cloudddp.backends.status import RunState, RunStatus
from cloudddp.observe import notebook
from cloudddp.runs import resumed
from cloudddp.runs.database import RunDatabase
from cloudddp.runs.runner import get_backend
from tests.support.cli import FIXTURES

TINY = FIXTURES / "tinyjob" / "job.yaml"
NOTE = "nothing left to train: it resumed the finished training in /ckpt (written by run tiny-0) and trained no step"


def test_a_runs_warnings_are_its_plans_then_what_its_end_said() -> None:
    plan = Job.load(TINY).render("local")
    plan.warnings = ["code: 3 files over 1 MB are shipped"]
    RunDatabase().add("tiny-20260101-000000-ab12", "local", "tiny", "succeeded", {resumed.NOTE: NOTE})
    run = Run("tiny-20260101-000000-ab12", get_backend("local"), plan=plan)
    assert run.warnings == ["code: 3 files over 1 MB are shipped", NOTE]
    RunDatabase().add("tiny-20260101-000001-cd34", "local", "tiny", "succeeded", {resumed.NOTE: ""})
    assert Run.attach("cd34").warnings == []  # nothing said, and no plan in this process


class Watched:
    """A run that has ended: its plan warned, and its end's note is in its status message."""

    run_id = "tiny-1"

    def __init__(self, ended: list[str]) -> None:
        self.said = ["the spot price may change"]
        self.ended = ended

    @property
    def warnings(self) -> list[str]:
        return self.said

    def status(self) -> Any:
        return RunStatus("tiny-1", "local", RunState.SUCCEEDED, message=f"{NOTE}; finished")

    def events(self, follow: bool = False, all_ranks: bool = False) -> Iterator[Any]:
        return iter(())

    def wait(self, timeout: float | None = None, poll: float = 1.0) -> Any:
        self.said = [*self.said, *self.ended]
        return self.status()


def test_watch_outside_a_notebook_prints_the_warnings_once(capsys: pytest.CaptureFixture[str]) -> None:
    notebook.watch(Watched(ended=[NOTE, "a later warning"]))
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "warning: the spot price may change"
    assert printed[1] == f"succeeded tiny-1: {NOTE}; finished"
    assert printed[2:] == ["warning: a later warning"]  # the note is in the status line already


def test_a_notebook_shows_the_warnings_under_the_status() -> None:
    shown = notebook.warnings_html(["<b>x</b> & y"])
    assert "warning: &lt;b&gt;x&lt;/b&gt; &amp; y" in shown
    assert notebook.warnings_html([]) == ""
