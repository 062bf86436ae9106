"""The ``environment`` of an Azure ML job: what ``azureml.environment`` may name, checked at render.

Azure ML takes a versioned environment, by one of the references its CLI v2 documents, or an inline
environment built on a Docker image:

- ``azureml:<name>:<version>`` or ``azureml:<name>@latest`` (a workspace environment; curated ones are
  named ``AzureML-...`` there),
- ``azureml://registries/<registry>/environments/<name>/versions/<version>`` or ``.../labels/<label>``
  (an environment in a registry; the curated ones live in the ``azureml`` registry),
- a Docker image, ``<host>/<repository>[:<tag>|@sha256:<digest>]``, which the job document carries as
  ``environment: {image: ...}`` (the image needs Python and the job's packages); a Docker Hub image may be
  named without its host, as azureml-examples do (``pytorch/pytorch:latest``; an official image such as
  ``python:3.11`` with its tag, so that a bare word is not taken for an image).

The default is the curated ACPT environment Azure/azureml-examples runs its PyTorch jobs on
(``acpt-pytorch-2.8-cuda12.6``), pinned: version 14 is the newest release that still holds PyTorch 2.8
(release tags ``environment/acpt-pytorch-2.8-cuda12.6/<n>`` of Azure/azureml-assets; from version 15 the
image replaces it with torch 2.10 under the same name), so ``@latest`` would change what a job runs on.
"""

from __future__ import annotations

import re
from typing import Any

from cloudddp.errors import UserError

DEFAULT_ENVIRONMENT = "azureml://registries/azureml/environments/acpt-pytorch-2.8-cuda12.6/versions/14"
DEFAULT_HOLDS = "PyTorch 2.8, CUDA 12.6, Python 3.10, Ubuntu 22.04, mlflow + azureml-mlflow"
FIELD = "azureml.environment"

_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}"
_WORKSPACE = re.compile(rf"^azureml:(?P<name>{_NAME})(?::(?P<version>[A-Za-z0-9._-]+)|@(?P<label>latest))\Z")
_REGISTRY = re.compile(rf"^azureml://registries/{_NAME}/environments/{_NAME}/(?:versions|labels)/[A-Za-z0-9._-]+\Z")
# A Docker reference with a registry host (a dot, a port or localhost before the first slash), lower-case path.
_IMAGE = re.compile(
    r"^(?P<host>[a-z0-9.-]+(?::[0-9]+)?)/(?P<path>[a-z0-9._/-]+)"
    r"(?::[A-Za-z0-9_.-]{1,128}|@sha256:[0-9a-f]{64})?\Z"
)
# A Docker Hub reference without its host: <namespace>/<repository> (a tag optional), or <repository>:<tag>.
_HUB_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HUB = re.compile(
    rf"^(?:(?P<namespace>{_HUB_PART})/)?{_HUB_PART}(?:/{_HUB_PART})*"
    r"(?P<ref>:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})?$"
)
EXAMPLES = (
    "azureml:AzureML-acpt-pytorch-2.8-cuda12.6:14",
    "azureml:my-env@latest",
    "azureml://registries/azureml/environments/acpt-pytorch-2.8-cuda12.6/versions/14",
    "mcr.microsoft.com/azureml/openmpi5.0-ubuntu24.04:latest",
    "pytorch/pytorch:latest",
)


def environment_field(reference: str) -> str | dict[str, Any]:
    """What the job document's ``environment`` is for ``reference``; a UserError when it is none of the forms."""
    ref = reference.strip()
    if _WORKSPACE.match(ref) or _REGISTRY.match(ref):
        return ref
    image = _IMAGE.match(ref)
    if image and ("." in image["host"] or ":" in image["host"] or image["host"] == "localhost"):
        return {"image": ref}
    hub = _HUB.match(ref)
    if hub and (hub["namespace"] or hub["ref"]) and not ref.startswith("azureml"):
        return {"image": ref}
    if ref.startswith("azureml://registries/"):
        why = "a registry environment ends in /versions/<version> or /labels/<label>"
    elif ref.startswith("azureml:") and not ref.startswith("azureml://") and not re.search(r"[:@]", ref[8:]):
        why = "a workspace environment needs a version or @latest"
    elif ref.startswith("AzureML-") or ref.startswith("azureml-"):
        why = "a curated environment is referenced with the azureml: prefix and a version"
    else:
        why = "not an environment reference Azure ML accepts"
    raise UserError(
        f"{FIELD}: {reference!r}: {why}",
        hint="give one of: " + ", ".join(EXAMPLES) + " (docs/azureml.md: 'Choosing the environment')",
    )


def describe(reference: str) -> str:
    """The plan's line about the environment."""
    if reference == DEFAULT_ENVIRONMENT:
        return f"environment: curated acpt-pytorch-2.8-cuda12.6 version 14 ({DEFAULT_HOLDS}); {FIELD} picks another"
    if isinstance(environment_field(reference), dict):
        return f"environment: the Docker image {reference} (it must have Python and the job's packages)"
    return f"environment: {reference}"
