"""Where this machine keeps cloudddp's state: ``$CLOUDDDP_HOME``, or ``~/.cloudddp``.

Every wing that keeps something between commands (the run registry, snapshots, digests, measured step times,
recovery chains, local run folders) finds its folder under :func:`home`, so this is the one module they all
share and it imports nothing of cloudddp.
"""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """The state folder, created on first use."""
    path = Path(os.environ.get("CLOUDDDP_HOME") or Path.home() / ".cloudddp")
    path.mkdir(parents=True, exist_ok=True)
    return path
