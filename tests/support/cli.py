"""Where the checkout is, and running the ``cloudddp`` command as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def cli(
    *args: str, timeout: float = 120, env: dict[str, str] | None = None, cwd: Path | None = None, inherit: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m cloudddp ARGS`` as a user would, capturing its output. ``env`` is added to this
    process's environment, or is the whole environment when ``inherit`` is False."""
    base = dict(os.environ) if inherit else {}
    return subprocess.run(
        [sys.executable, "-m", "cloudddp", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or ROOT,
        env={**base, "COLUMNS": "200", **(env or {})},
    )
