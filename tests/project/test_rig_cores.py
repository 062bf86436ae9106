"""Every process a test starts waits without spinning (tests/support/cores.py): the rigs share this machine's cores."""

from __future__ import annotations

import subprocess
import sys

from tests.support.cores import SHARED_CORES_ENV


def test_a_process_started_by_a_test_gets_the_passive_wait() -> None:
    shown = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('OMP_WAIT_POLICY'))"], capture_output=True, text=True
    )
    assert shown.stdout.strip() == SHARED_CORES_ENV["OMP_WAIT_POLICY"] == "PASSIVE"
