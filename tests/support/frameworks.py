"""The framework projects of ``examples/`` as the conformance matrix runs them (tests/across_backends/
test_frameworks.py and the backends' own cells): a copy of the project with its job.yaml, shortened arguments, and
what their logs say about a stop and a resume."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import yaml

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
