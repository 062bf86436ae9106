"""The map of cloudddp, checked by ``make lint``: every module is named where a reader looks for it.

- Every package of cloudddp (a wing such as ``cloudddp/runs/``, or a package inside one such as a backend's)
  names each module and package directly in it in its ``__init__`` docstring.
- docs/architecture.md names every top-level module, every wing, and every module and package directly in a wing
  (the modules inside a wing's packages are left to that package's docstring).
- Neither names a module that does not exist: a ``:mod:`` reference, a path such as ``runs/placement.py`` whose
  folders are cloudddp's, or a file in architecture.md's diagram (its fenced block).

A module is *named* by its dotted path (``cloudddp.runs.placement``, ``:mod:`~cloudddp.runs.placement```), a
relative ``:mod:`.placement```, its file (``placement.py``, ``runs/placement.py``) or, for a package, its folder
(``checkpoints/``); in a docstring also by its bare name as a literal (````placement````).

    python -m tests.support.map          # this checkout
    python -m tests.support.map ROOT     # another tree holding cloudddp/ and docs/architecture.md

Each finding is one line, e.g. ``cloudddp/runs/__init__.py: does not name placement (cloudddp/runs/placement.py)``;
the exit status is 1 when there is any.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = Path("docs", "architecture.md")

Name = tuple[str, ...]
"""A module's dotted path as a tuple, ``("cloudddp", "runs", "placement")``, or the tail of one a text names."""

_IDENT = r"[A-Za-z_]\w*"
_FILE = re.compile(rf"(?<![\w./-])((?:{_IDENT}/)*{_IDENT})\.py\b")
_FOLDER = re.compile(rf"(?<![\w./-])((?:{_IDENT}/)*{_IDENT})/(?![\w*])")
_DOTTED = re.compile(rf"(?<![\w.])cloudddp(?:\.{_IDENT})+")
_MOD = re.compile(r":mod:`~?([.\w]+)`")
_LITERAL = re.compile(rf"``({_IDENT})``")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _modules(package: Path) -> Iterator[Path]:
    """The modules and packages directly in ``package`` (``__init__.py`` and ``__main__.py`` are its own)."""
    for path in sorted(package.iterdir()):
        package_dir = path.is_dir() and (path / "__init__.py").is_file()
        if package_dir or (path.suffix == ".py" and path.name not in ("__init__.py", "__main__.py")):
            yield path


def _name(path: Path, root: Path) -> Name:
    return path.relative_to(root).with_suffix("").parts


def packages(root: Path) -> Iterator[Path]:
    """Every package under ``root``/cloudddp but cloudddp itself, outermost first."""
    top = root / "cloudddp"
    yield from sorted(p.parent for p in top.rglob("__init__.py") if p.parent != top)


def _references(text: str, *, literals: bool) -> set[Name]:
    """What ``text`` names: dotted paths, files and folders (as path tails), ``:mod:`` targets; with ``literals``
    also ````name```` literals."""
    found = {tuple(m.split("/")) for m in _FILE.findall(text)}
    found |= {tuple(m.split("/")) for m in _FOLDER.findall(text)}
    found |= {tuple(m.split(".")) for m in _DOTTED.findall(text)}
    found |= {tuple(m.lstrip(".").split(".")) for m in _MOD.findall(text) if m.lstrip(".")}
    if literals:
        found |= {(m,) for m in _LITERAL.findall(text)}
    return found


def _named(module: Name, references: set[Name]) -> bool:
    return any(ref == module[-len(ref) :] for ref in references)


def docstring(package: Path) -> str:
    return ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""


def _defines(package: Path, name: str) -> bool:
    """``name`` is an attribute ``package``'s ``__init__`` defines or imports (a dotted path may go on to it)."""
    for node in ast.parse((package / "__init__.py").read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = {node.name}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {t.id for t in targets if isinstance(t, ast.Name)}
        else:
            continue
        if name in names:
            return True
    return False


def _resolves(dotted: Name, root: Path) -> bool:
    """``dotted`` is a module or package under ``root``, or an attribute of one (a class, a function)."""
    where = root
    for i, part in enumerate(dotted):
        if (where / part / "__init__.py").is_file():
            where = where / part
        elif (where / f"{part}.py").is_file():
            return True
        else:
            return i > 0 and (where / "__init__.py").is_file() and _defines(where, part)
    return True


def _dangling_mod(text: str, package: Path | None, root: Path) -> Iterator[str]:
    """``:mod:`` targets in ``text`` that are no module (a relative one is read against ``package``)."""
    for target in _MOD.findall(text):
        if target.startswith(".") and package is not None:
            dotted = (*_name(package, root), *target.lstrip(".").split("."))
        else:
            dotted = tuple(target.split("."))
        if dotted[0] == "cloudddp" and not _resolves(dotted, root):
            yield ".".join(dotted)


def _dangling_paths(text: str, root: Path) -> Iterator[str]:
    """``a/b.py`` paths whose first folder is cloudddp's (``cloudddp/…``, ``runs/…``, ``slurm/…``) but no file."""
    folders: dict[str, list[Path]] = {"cloudddp": [root / "cloudddp"]}
    for package in packages(root):
        folders.setdefault(package.name, []).append(package)
    for path in _FILE.findall(text):
        first, *rest = path.split("/")
        if rest and first in folders and not any((f / f"{'/'.join(rest)}.py").is_file() for f in folders[first]):
            yield f"{path}.py"


def check_docstrings(root: Path) -> list[str]:
    """Each package's docstring names what is in it, and no module that does not exist."""
    problems = []
    for package in packages(root):
        rel = (package / "__init__.py").relative_to(root).as_posix()
        text = docstring(package)
        if not text:
            problems.append(f"{rel}: no docstring: say what this package owns and may import")
            continue
        refs = _references(text, literals=True)
        for module in _modules(package):
            if not _named(_name(module, root), refs):
                problems.append(f"{rel}: does not name {module.stem} ({module.relative_to(root).as_posix()})")
        problems += [f"{rel}: names {gone}, which is no module" for gone in _dangling_mod(text, package, root)]
        problems += [f"{rel}: names {gone}, which is no file" for gone in _dangling_paths(text, root)]
    return problems


def _owed_by_the_architecture(root: Path) -> Iterable[Path]:
    """What docs/architecture.md names: the top-level modules, the wings and what is directly in each wing."""
    top = root / "cloudddp"
    for path in _modules(top):
        yield path
        if path.is_dir():
            yield from _modules(path)


def check_architecture(root: Path) -> list[str]:
    """docs/architecture.md names every top-level module, wing and wing module, and no file that does not exist."""
    text = (root / ARCHITECTURE).read_text(encoding="utf-8")
    refs = _references(text, literals=False)
    page = ARCHITECTURE.as_posix()
    problems = [
        f"{page}: does not name {path.relative_to(root).as_posix()}"
        for path in _owed_by_the_architecture(root)
        if not _named(_name(path, root), refs)
    ]
    problems += [f"{page}: names {gone}, which is no module" for gone in _dangling_mod(text, None, root)]
    problems += [f"{page}: names {gone}, which is no file" for gone in _dangling_paths(text, root)]
    files = {p.stem for p in (root / "cloudddp").rglob("*.py")}
    for block in _FENCE.findall(text):
        for path in _FILE.findall(block):
            if "/" not in path and path not in files:
                problems.append(f"{page}: its diagram names {path}.py, which is no module")
    return problems


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else ROOT
    problems = list(dict.fromkeys(check_docstrings(root) + check_architecture(root)))
    for line in problems:
        print(line)
    if problems:
        print(
            f"{len(problems)} found: name each module in its package's __init__ docstring and each wing's module in "
            f"{ARCHITECTURE.as_posix()} (what it owns, in a few words); drop the names of modules that are gone",
            file=sys.stderr,
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
