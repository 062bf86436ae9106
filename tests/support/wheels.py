"""A minimal pure-Python wheel, so a job's requirements install without reaching an index."""

from __future__ import annotations

import zipfile
from pathlib import Path


def wheel(folder: Path) -> Path:
    """A minimal pure-Python wheel, so requirements.txt installs without an index."""
    path = folder / "rehearsal_dep-1.0-py3-none-any.whl"
    info = "rehearsal_dep-1.0.dist-info"
    files = {
        "rehearsal_dep.py": "VALUE = 'from requirements.txt'\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: rehearsal-dep\nVersion: 1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path
