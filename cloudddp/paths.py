"""Where this machine keeps cloudddp's state: ``$CLOUDDDP_HOME``, or ``~/.cloudddp``.

Every wing that keeps something between commands (the run registry, snapshots, digests, measured step times,
recovery chains, local run folders) finds its folder under :func:`home`, so this is the one module they all
share and it imports nothing of cloudddp.
"""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """The state folder, created on first use, private to its owner (0700): it holds run folders, plans,
    logs and checkpoints. An existing one of ours that others could enter is closed too."""
    path = Path(os.environ.get("CLOUDDDP_HOME") or Path.home() / ".cloudddp")
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_mode & 0o077 and st.st_uid == os.geteuid():
        path.chmod(0o700)
    return path


PACKAGE = Path(__file__).resolve().parent


def data_text(name: str) -> str:
    """A data file shipped in ``cloudddp/data/`` (the catalog's CSV tables), as text.

    Read from the package's folder rather than through ``importlib.resources``: every command reads the
    catalog, importing ``importlib.resources`` costs ~3 ms of each render, and cloudddp is always installed as
    files (pip unpacks wheels; it is never imported from a zip).
    """
    return (PACKAGE / "data" / name).read_text(encoding="utf-8")
