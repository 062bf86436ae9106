"""The framework projects of ``examples/`` as the conformance matrix runs them (tests/across_backends/
test_frameworks.py and the backends' own cells): a copy of the project with its job.yaml, shortened arguments, and
what their logs say about a stop and a resume."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import yaml

from cloudddp.api import Run
from cloudddp.backends.status import RunState
from tests.support import sample_trace
from tests.support.cli import ROOT

EXAMPLES = ROOT / "examples"


def project(name: str, root: Path, args: list[str], **spec: Any) -> Path:
    """``examples/<name>`` copied under ``root`` with its job.yaml's ``code.args`` replaced by ``args`` and the
    top-level sections in ``spec`` replaced; the copied job.yaml's path."""
    folder = root / name
    shutil.copytree(EXAMPLES / name, folder, ignore=shutil.ignore_patterns("__pycache__"))
    job = yaml.safe_load((folder / "job.yaml").read_text())
    job["code"]["args"] = args
    job.update(spec)
    (folder / "job.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    return folder / "job.yaml"


def steps_in(pattern: str, text: str) -> list[int]:
    """Every step number ``pattern`` (with one ``(\\d+)`` group) finds in ``text``."""
    return [int(m) for m in re.findall(pattern, text)]


def traced(name: str, root: Path, args: list[str], **spec: Any) -> Path:
    """:func:`project` with the sample tracer (tests/support/sample_trace.py) in its code folder and environment."""
    path = project(name, root, args, **spec)
    job = yaml.safe_load(path.read_text())
    job["env"] = {**job.get("env", {}), **sample_trace.install_into(path.parent)}
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    return path


def succeeded(run: Run, timeout: float = 240) -> str:
    """The run's log, once it has succeeded (its log's end in the failure's message otherwise)."""
    status = run.wait(timeout=timeout, poll=0.5)
    log = "\n".join(line.text for line in run.logs())
    assert status.state is RunState.SUCCEEDED, log[-3000:]
    return log
