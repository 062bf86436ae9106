"""Green means proven: on CI a skip is a failure unless its reason is allowed, every test the guarantees
tables (docs/guarantees.md, docs/security.md) cite exists, and no assertion hides a check in its message."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import ROOT

SKIPPING = """
import pytest

def test_needs_a_rig():
    pytest.skip("the rig did not start")

def test_plain():
    assert 1 + 1 == 2
"""


def pytest_on(folder: Path, ci: str, *options: str) -> subprocess.CompletedProcess[str]:
    """pytest over ``folder``'s probe modules with this suite's conftest, as CI (``CI=true``) or not."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *options, "-p", "tests.conftest", "-p", "no:cacheprovider", str(folder)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "CI": ci},
        timeout=120,
    )


@pytest.mark.parametrize(("ci", "code"), [("true", 1), ("", 0)])
def test_on_ci_a_skip_for_a_missing_rig_fails_the_run(tmp_path: Path, ci: str, code: int) -> None:
    (tmp_path / "test_probe.py").write_text(SKIPPING)
    result = pytest_on(tmp_path, ci)
    assert result.returncode == code, result.stdout[-2000:]
    named = "test_probe.py::test_needs_a_rig: Skipped: the rig did not start" in result.stdout
    assert named == bool(ci), result.stdout[-2000:]


MODULE_SKIPS = {
    "importorskip": 'pytest.importorskip("no_such_module_4c1e")',
    "skip": 'pytest.skip("the rig did not start", allow_module_level=True)',
}
"""How a module skips itself at its top, before its tests are collected."""


@pytest.mark.parametrize("workers", ["0", "2"])
@pytest.mark.parametrize("how", sorted(MODULE_SKIPS))
@pytest.mark.parametrize(("ci", "code"), [("true", 1), ("", 0)])
def test_on_ci_a_module_skipped_at_collection_fails_the_run(
    tmp_path: Path, ci: str, code: int, how: str, workers: str
) -> None:
    """A module-level skip reports no test, only a skipped collection: on CI it fails the run too, naming the
    module, with and without pytest-xdist's workers."""
    (tmp_path / "test_probe.py").write_text(f"import pytest\n\n{MODULE_SKIPS[how]}\n\n\ndef test_x():\n    pass\n")
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    assert 1 + 1 == 2\n")
    result = pytest_on(tmp_path, ci, "-n", workers)
    assert result.returncode == code, result.stdout[-2000:]
    assert ("test_probe.py: " in result.stdout and "each is a proof missing" in result.stdout) == bool(ci)


def _guarantee_citations() -> list[str]:
    table = "".join((ROOT / "docs" / page).read_text() for page in ("guarantees.md", "security.md"))
    cells = [row.rsplit("|", 2)[1] for row in table.splitlines() if row.startswith("| ") and "`tests/" in row]
    return [cell for cell in cells]


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test")}


def _resolve(reference: str, previous: Path | None) -> tuple[Path | None, str | None]:
    """``tests/x.py::name``, ``tests/x.py``, ``::name`` (the file before), ``tests/dir/…::name`` (a file there)."""
    where, _, name = reference.partition("::")
    if not where:
        return previous, name
    if where.endswith("…"):
        folder = ROOT / where.rstrip("…").rstrip("/")
        found = [p for p in sorted(folder.rglob("test_*.py")) if name in _test_names(p)]
        return (found[0] if found else None), name
    return ROOT / where, name or None


def test_every_test_the_guarantees_table_cites_exists() -> None:
    cells = _guarantee_citations()
    assert len(cells) >= 10, "the guarantees table was not found"
    missing = []
    for cell in cells:
        previous: Path | None = None
        for reference in re.findall(r"`(tests/[^`]+|::[^`]+)`", cell):
            path, name = _resolve(reference, previous)
            if path is None or not path.is_file():
                missing.append(f"{reference}: no such file")
                continue
            if name and name not in _test_names(path):
                missing.append(f"{reference}: no test {name} in {path.relative_to(ROOT)}")
            previous = path
    assert missing == []


def test_the_citation_check_finds_a_missing_test() -> None:
    path, name = _resolve("tests/project/test_proof.py::test_that_does_not_exist", None)
    assert path is not None and name not in _test_names(path)
    assert _resolve("::test_every_test_the_guarantees_table_cites_exists", path)[0] == path


def _asserts_hiding_a_check(source: str) -> list[int]:
    """``assert a, b and c`` / ``assert a, b or c``: the second check is only the message, never asserted."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Assert) and isinstance(node.msg, (ast.BoolOp, ast.Compare))
    ]


def test_no_assertion_hides_a_check_in_its_message() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for folder in ("tests", "cloudddp", "src_train", "bench")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line in _asserts_hiding_a_check(path.read_text())
    ]
    assert found == []
    assert _asserts_hiding_a_check('assert "a" in out, errs and "b" in out\n') == [1]


def test_the_canary_search_finds_every_form_of_a_secret_in_text_archives_and_files(tmp_path: Path) -> None:
    """The cloud rigs' secret scans find nothing; this is what they would have found."""
    import io
    import tarfile

    from tests.support import canary

    assert len(canary.FORMS) >= 12  # the whole values, each line of the key, their escapes and encodings
    for form in canary.FORMS:
        assert f"text: {form!r}" in canary.leaks(f"before {form} after", "text")
    line = canary.PEM.splitlines()[1].encode()
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w:gz") as archive:
        member = tarfile.TarInfo("inner/config.txt")
        member.size = len(line)
        archive.addfile(member, io.BytesIO(line))
    assert canary.leaks(packed.getvalue(), "sourcedir.tar.gz") == [
        f"sourcedir.tar.gz -> inner/config.txt: {line.decode()!r}"
    ]
    (tmp_path / "deep" / "er").mkdir(parents=True)
    (tmp_path / "deep" / "er" / "state.json").write_text(json.dumps({"token": canary.PEM}))
    assert canary.files_leaking(tmp_path) and canary.searched_files(tmp_path) == 1
    assert canary.leaks("an ordinary log line about tokens and keys", "text") == []


@pytest.mark.parametrize("sent", [None, "SIGTERM", "SIGKILL"])
def test_the_victim_tells_a_signal_sent_just_before_its_probes(sent: str | None) -> None:
    """The negative checks "nothing signalled it" wait for an answered probe instead of sleeping: a signal sent
    just before (with no pause) is always seen."""
    import os
    import signal

    from tests.support.victim import Victim

    victim = Victim()
    try:
        if sent:
            os.kill(victim.pid, getattr(signal, sent))
        seen = victim.signals()
    finally:
        victim.stop()
    expected = {
        None: [["SIGWINCH"]],
        "SIGTERM": [["SIGTERM", "(ended)"]],  # taken before the probe
        "SIGKILL": [["(ended)"]],
    }
    assert seen in expected[sent]
