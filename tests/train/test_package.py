"""The shared script is one package with relative imports: it adds only ``train`` and ``ddptrain`` to the top-level
names, so an installed module called ``distributed`` (Dask's), ``data`` or ``config`` is neither shadowed by the
script's modules nor shadows them."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import ROOT

SRC = ROOT / "src_train"
TAKEN = ("distributed", "data", "config", "loop", "models", "metrics", "checkpoint", "storage", "user", "augment")


def test_the_script_folder_adds_only_train_and_its_package_to_the_top_level_names() -> None:
    assert {m.name for m in pkgutil.iter_modules([str(SRC)])} == {"train", "ddptrain"}


@pytest.mark.slow
def test_installed_modules_with_the_same_names_neither_shadow_the_script_nor_are_shadowed(tmp_path: Path) -> None:
    """Installed modules named like the script's (each raises if the script imports it), before and after the
    script's folder on sys.path: the script trains, and ``import distributed`` still finds the installed one."""
    site = tmp_path / "site"
    site.mkdir()
    for name in TAKEN:
        (site / f"{name}.py").write_text(f"INSTALLED = True\ndef __getattr__(attr):\n    raise ImportError({name!r})\n")
    probe = (
        "import sys\n"
        f"sys.path[:0] = [{str(site)!r}, {str(SRC)!r}, {str(site)!r}]\n"
        "import train\n"
        "code = train.main(['--epochs', '1', '--batch-size', '256', '--checkpoint-every', '0',"
        " '--model-dir', 'out'])\n"
        f"import {', '.join(TAKEN)}\n"
        f"assert all(sys.modules[n].INSTALLED for n in {TAKEN!r})\n"
        "print('trained', code)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120, env={"PATH": ""}
    )
    assert run.returncode == 0 and "trained 0" in run.stdout, run.stderr[-3000:]
