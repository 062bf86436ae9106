"""The layers hold: no import circle, a handful of top-level modules, every wing says what it owns, imports at
the top of modules (not inside functions to dodge a circle), and rendering never reaches the runner.

``make lint`` runs import-linter with the contracts of pyproject.toml (cloudddp's own contract types are in
tests/support/contracts.py); these tests check what import-linter does not, and that a broken contract really
fails lint: a layer crossed, a backend package importing another or a module no backend may use.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest
import tomllib

from tests.support.cli import ROOT

PACKAGE = ROOT / "cloudddp"
# Optional heavy dependencies stay off the render path: these may be imported inside a function.
LAZY_ALLOWED = (
    "azure",
    "boto3",
    "botocore",
    "sagemaker",
    "torch",
    "numpy",
    "matplotlib",
    "pandas",
    "mlflow",
    "IPython",
)


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    adjacency = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(adjacency):
        if root in index:
            continue
        work = [(root, iter(adjacency[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(adjacency[child])))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_no_import_circle_among_cloudddps_modules() -> None:
    assert _cycles(grimp.build_graph("cloudddp")) == []


def test_the_cycle_finder_finds_a_circle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "circular"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from circular import b\n")
    (pkg / "b.py").write_text("from circular import c\n")
    (pkg / "c.py").write_text("import circular.a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _cycles(grimp.build_graph("circular")) == [["circular.a", "circular.b", "circular.c"]]


def test_a_handful_of_top_level_modules_and_every_wing_says_what_it_owns_and_may_import() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 8, top
    wings = sorted(p.parent for p in PACKAGE.glob("*/__init__.py"))
    assert {w.name for w in wings} >= {"spec", "code", "catalog", "observe", "backends", "runs", "cli"}
    for wing in wings:
        doc = ast.get_docstring(ast.parse((wing / "__init__.py").read_text())) or ""
        assert len(doc) > 80 and "may import" in doc.lower(), f"{wing.name}/__init__.py: {doc!r}"


def test_the_backends_docstring_names_the_shared_modules_the_backend_contract_allows() -> None:
    """One list: the import-linter contract's shared modules, which the wing's docstring names as shared."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (only,) = [c for c in contracts if c["type"] == "imports_only" and c.get("group") == "cloudddp.backends"]
    allowed = {m for m in only["allowed_modules"] if m.startswith("cloudddp.backends.")}
    doc = ast.get_docstring(ast.parse((PACKAGE / "backends" / "__init__.py").read_text())) or ""
    shared = doc.partition("\n\nThe registry")[0]
    assert set(re.findall(r":mod:`~(cloudddp\.backends\.\w+)`", shared)) == allowed


def _function_level_imports(source: str) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.ImportFrom) and inner.level == 0 and inner.module:
                names = [inner.module]
            elif isinstance(inner, ast.Import):
                names = [alias.name for alias in inner.names]
            else:
                continue
            found += [(inner.lineno, n) for n in names if n.split(".")[0] == "cloudddp"]
    return found


def test_no_module_of_cloudddp_is_imported_inside_a_function() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, name in _function_level_imports(path.read_text())
    ]
    assert offenders == []
    assert _function_level_imports("def f():\n    from cloudddp.runs import runner\n") == [(2, "cloudddp.runs")]


def test_rendering_imports_the_spec_the_plan_and_one_backend_never_the_runner() -> None:
    code = (
        "import sys; sys.argv = ['cloudddp', 'render', sys.argv[1], '--backend', 'azureml']\n"
        "from cloudddp.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "mods = sorted(m for m in sys.modules if m.startswith('cloudddp'))\n"
        "print('MODULES=' + ','.join(mods), file=sys.stderr)\n"
    )
    job = str(ROOT / "jobs" / "cifar10-azureml.yaml")
    result = subprocess.run([sys.executable, "-c", code, job], capture_output=True, text=True, cwd=ROOT, timeout=60)
    line = [ln for ln in result.stderr.splitlines() if ln.startswith("MODULES=")]
    assert line, result.stderr
    modules = line[-1].removeprefix("MODULES=").split(",")
    assert "cloudddp.backends.azureml" in modules and "cloudddp.plan" in modules and "cloudddp.spec.model" in modules
    assert [m for m in modules if m.startswith(("cloudddp.runs", "cloudddp.api"))] == []
    others = {"cloudddp.backends.local", "cloudddp.backends.sagemaker", "cloudddp.backends.slurm"}
    assert others.isdisjoint(modules), "render imports only the backend it renders"


LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
needs_import_linter = pytest.mark.skipif(
    not LINT_IMPORTS.is_file(), reason="import-linter is a dev dependency; `make lint` installs it"
)


def _project_copy(tmp_path: Path) -> Path:
    """The package, pyproject.toml and the project's contract types, copied for import-linter to check there."""
    shutil.copytree(PACKAGE, tmp_path / "cloudddp", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "tests" / "support").mkdir(parents=True)
    for rel in ("tests/__init__.py", "tests/support/__init__.py", "tests/support/contracts.py"):
        shutil.copy(ROOT / rel, tmp_path / rel)
    return tmp_path


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=tree,
        timeout=120,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
    )


def _add_import(module: Path, statement: str) -> None:
    source = module.read_text()
    marker = "from __future__ import annotations\n"
    assert marker in source, module
    module.write_text(source.replace(marker, f"{marker}\n{statement}\n", 1))


@needs_import_linter
def test_a_broken_layer_fails_lint_naming_the_import(tmp_path: Path) -> None:
    """Copy the package, make the backend contract import the runner, and run import-linter on the copy."""
    tree = _project_copy(tmp_path)
    base = tree / "cloudddp" / "backends" / "base.py"
    base.write_text(base.read_text().replace("import abc\n", "import abc\n\nimport cloudddp.runs.runner\n", 1))
    result = _lint_imports(tree)
    assert result.returncode == 1, result.stdout
    assert "cloudddp.backends.base -> cloudddp.runs.runner" in result.stdout


@needs_import_linter
def test_a_new_backend_package_that_imports_another_fails_lint_without_a_list_to_update(tmp_path: Path) -> None:
    """A backend package registered in the entry-point group is in the independence contract by that alone: one
    that imports local's modules breaks it, and so does its import of the registry, which no backend may use."""
    tree = _project_copy(tmp_path)
    toy = tree / "cloudddp" / "backends" / "toy"
    toy.mkdir()
    (toy / "__init__.py").write_text(
        '"""A toy backend."""\n\nfrom __future__ import annotations\n\n'
        "import cloudddp.backends.local.rundir\nimport cloudddp.backends.plugins\nimport cloudddp.backends.base\n"
    )
    pyproject = tree / "pyproject.toml"
    entry = '[project.entry-points."cloudddp.backends"]\n'
    pyproject.write_text(pyproject.read_text().replace(entry, f'{entry}toy = "cloudddp.backends.toy:ToyBackend"\n'))
    result = _lint_imports(tree)
    assert result.returncode == 1, result.stdout
    out = " ".join(result.stdout.split())
    assert "cloudddp.backends.toy is not allowed to import cloudddp.backends.local" in out, out
    assert re.search(r"cloudddp\.backends\.toy -> cloudddp\.backends\.plugins \(l\.\d+\): not allowed", out), out
    assert "cloudddp.backends.toy -> cloudddp.backends.base" not in out, out


@needs_import_linter
def test_a_backend_that_imports_the_runner_or_an_in_job_program_that_imports_cloudddp_fails_lint(
    tmp_path: Path,
) -> None:
    tree = _project_copy(tmp_path)
    _add_import(tree / "cloudddp" / "backends" / "slurm" / "flags.py", "import cloudddp.runs.cost")
    _add_import(tree / "cloudddp" / "injob" / "stall.py", "import cloudddp.errors")
    result = _lint_imports(tree)
    assert result.returncode == 1, result.stdout
    out = " ".join(result.stdout.split())
    assert re.search(r"cloudddp\.backends\.slurm\.flags -> cloudddp\.runs\.cost \(l\.\d+\): not allowed", out), out
    assert re.search(r"cloudddp\.injob\.stall -> cloudddp\.errors \(l\.\d+\): not allowed", out), out
