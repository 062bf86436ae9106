"""The ``inputs`` of an Azure ML job: each typed by what it is, as the CLI v2 documents them.

``uri_file`` for a single file (``${{inputs.X}}`` is then the file's own path in the job), ``uri_folder``
for a folder; ``mltable`` is never chosen (it is a table definition, not files to train on). Both take the
modes the spec offers: ``mount`` is ``ro_mount`` (read-only mount; a file is mounted as a file) and
``download`` is ``download`` (copied to the node before the command starts).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlparse

from cloudddp.errors import UserError
from cloudddp.spec.model import Input, JobSpec

MODES = {"mount": "ro_mount", "download": "download"}
_EXTENSION = re.compile(r"\.[A-Za-z0-9]*[A-Za-z][A-Za-z0-9]*$")  # .gz, .csv, .h5, not .2 (a version)
_DATA_ASSET = re.compile(r"^azureml:(?!//)")  # azureml:<name>:<version> or azureml:<name>@latest


def uri_is_file(uri: str) -> bool:
    """A URI names a file when its last path segment has a file extension (a query, e.g. a SAS, is ignored)."""
    path = urlparse(uri).path if "://" in uri else uri
    if not path or path.endswith("/"):
        return False
    return bool(_EXTENSION.search(path.rsplit("/", 1)[-1]))


def input_type(name: str, item: Input, where: str, local: bool) -> str:
    """``uri_file`` or ``uri_folder`` for input ``name`` at ``where`` (a local path already resolved)."""
    if local:
        from pathlib import Path

        found = Path(where)
        is_file = found.is_file()
        if not is_file and not found.is_dir():
            raise UserError(f"inputs.{name}: {where} does not exist", hint="input paths are relative to the spec file")
        if item.kind != "auto" and (item.kind == "file") != is_file:
            raise UserError(
                f"inputs.{name}: kind is {item.kind} but {where} is a {'file' if is_file else 'folder'}",
                hint=f"set inputs.{name}.kind: auto (or {'file' if is_file else 'folder'})",
            )
        return "uri_file" if is_file else "uri_folder"
    if item.kind != "auto":
        return f"uri_{item.kind}"
    return "uri_file" if not _DATA_ASSET.match(where) and uri_is_file(where) else "uri_folder"


def job_inputs(spec: JobSpec) -> tuple[dict[str, Any], list[str]]:
    """The job document's ``inputs`` and the plan lines that say what each became."""
    inputs: dict[str, Any] = {}
    decisions: list[str] = []
    for name, item in spec.inputs.items():
        where = spec.input_location(name, "azureml")
        remote = "://" in where or where.startswith("azureml:")
        if where.startswith("s3://"):
            raise UserError(
                f"inputs.{name}: Azure ML cannot read {where}",
                hint=f"give inputs.{name}.at.azureml: azureml://... (or https://, or a local folder)",
            )
        path = where if remote else str((spec.base_dir / where).resolve())
        kind = input_type(name, item, path, local=not remote)
        inputs[name] = {"type": kind, "path": path, "mode": MODES[item.mode]}
        if _DATA_ASSET.match(where) and item.kind == "auto":
            decisions.append(
                f"inputs.{name}: a data asset is passed as uri_folder; set inputs.{name}.kind: file "
                "if the asset is a uri_file"
            )
        elif kind == "uri_file":
            decisions.append(f"inputs.{name}: uri_file ({MODES[item.mode]}): the job gets the file's own path")
    return inputs, decisions
