"""cloudddp's own import-linter contract types (``contract_types`` in pyproject.toml's ``[tool.importlinter]``).

import-linter puts the working folder on ``sys.path``, so ``lint-imports`` run from the project's root finds them.

- ``backend_independence``: no backend package imports another, directly or through other modules. The packages are
  those the backends' entry-point group registers (``[project.entry-points."cloudddp.backends"]``), read from
  pyproject.toml each run: a backend added there is in the contract without another list to keep.
- ``imports_only``: a package imports nothing of the root package but itself and the ``allowed_modules`` (each one
  with the modules inside it). Its packages are ``source_modules``, or the backend packages of ``group``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import tomllib
from grimp import ImportGraph
from importlinter.application import output
from importlinter.contracts.independence import IndependenceContract
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck, InvalidContractOptions
from importlinter.domain.helpers import module_expressions_to_modules
from importlinter.domain.imports import ModuleExpression


def backend_packages(group: str, container: str, pyproject: Path = Path("pyproject.toml")) -> list[str]:
    """The packages in ``container`` that entry-point ``group`` in ``pyproject`` registers, sorted: an entry
    ``slurm = "cloudddp.backends.slurm:SlurmBackend"`` gives ``cloudddp.backends.slurm`` (entries outside
    ``container``, a plugin's, are not this project's to check)."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    entries: dict[str, str] = project.get("entry-points", {}).get(group, {})
    prefix = container + "."
    found = set()
    for target in entries.values():
        module = target.partition(":")[0].strip()
        if module.startswith(prefix):
            found.add(prefix + module.removeprefix(prefix).split(".")[0])
    return sorted(found)


class BackendIndependence(IndependenceContract):
    """An independence contract over the backend packages that ``group`` registers (see :func:`backend_packages`).

    Options: ``group`` (the entry-point group), ``container`` (the package the backend packages are in),
    ``pyproject`` (default: pyproject.toml in the working folder).
    """

    modules = fields.SetField(subfield=fields.ModuleExpressionField(), required=False)
    group = fields.StringField()
    container = fields.StringField()
    pyproject = fields.StringField(required=False, default="pyproject.toml")

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        found = backend_packages(str(self.group), str(self.container), Path(str(self.pyproject)))
        if not found:
            raise ValueError(f"the entry-point group {self.group!r} registers no package in {self.container}")
        self.modules = {ModuleExpression(name) for name in found}
        output.verbose_print(verbose, f"Backend packages: {', '.join(found)}")
        return super().check(graph, verbose)


class ImportsOnly(Contract):
    """Each source package imports, of the root package, only itself and the allowed modules (and what is in them).

    Options: ``source_modules`` (module expressions), or ``group`` and ``container`` (the backend packages, as
    :class:`BackendIndependence` reads them); ``allowed_modules`` (module expressions; none: nothing but itself);
    ``pyproject``. Only direct imports are checked: what an allowed module imports is its own contracts' concern.
    """

    source_modules = fields.SetField(subfield=fields.ModuleExpressionField(), required=False)
    group = fields.StringField(required=False)
    container = fields.StringField(required=False)
    allowed_modules = fields.SetField(subfield=fields.ModuleExpressionField(), required=False)
    pyproject = fields.StringField(required=False, default="pyproject.toml")

    def validate(self) -> None:
        if not self.source_modules and not (self.group and self.container):
            raise InvalidContractOptions({"source_modules": "give source_modules, or group and container"})

    def _sources(self, graph: ImportGraph) -> list[str]:
        if self.source_modules:
            found = {m.name for m in module_expressions_to_modules(graph, self.source_modules)}  # type: ignore[arg-type]
            return sorted(found)
        return backend_packages(str(self.group), str(self.container), Path(str(self.pyproject)))

    def _outside(self, graph: ImportGraph, package: str, allowed: set[str]) -> Iterator[dict[str, Any]]:
        """Each import from ``package`` into the root package that is neither inside it nor allowed."""
        root = package.split(".", maxsplit=1)[0]
        for importer in sorted({package} | graph.find_descendants(package)):
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                own = imported == package or imported.startswith(package + ".")
                if own or imported.split(".")[0] != root or imported in allowed:
                    continue
                details = graph.get_import_details(importer=importer, imported=imported)
                lines = ", ".join(str(d["line_number"]) for d in details)
                yield {"importer": importer, "imported": imported, "lines": lines}

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        expressions = self.allowed_modules or set()
        allowed = {m.name for m in module_expressions_to_modules(graph, expressions, as_packages=True)}  # type: ignore[arg-type]
        sources = self._sources(graph)
        for package in sources:
            if package not in graph.modules:
                raise ValueError(f"Module '{package}' does not exist.")
        output.verbose_print(verbose, f"Packages checked: {', '.join(sources)}")
        invalid = [found for package in sources for found in self._outside(graph, package, allowed)]
        return ContractCheck(kept=not invalid, metadata={"invalid": invalid})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for found in check.metadata["invalid"]:
            output.print_error(f"{found['importer']} -> {found['imported']} (l.{found['lines']}): not allowed")
            output.new_line()
