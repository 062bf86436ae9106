"""Backends by name, imported only when used (so ``--help`` and ``render`` stay light)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..errors import UserError

if TYPE_CHECKING:
    from .base import Backend

# name -> "module:Class". Backend modules import their cloud SDK lazily, inside the methods that call it.
BACKENDS: dict[str, str] = {
    "local": "cloudddp.backends.local:LocalBackend",
    "sagemaker": "cloudddp.backends.sagemaker:SageMakerBackend",
    "azureml": "cloudddp.backends.azureml:AzureMLBackend",
}


def backend_names() -> list[str]:
    return list(BACKENDS)


def get_backend(name: str, **options: object) -> Backend:
    """The backend called ``name``, constructed with ``options`` (e.g. a credential for Azure ML)."""
    return backend_class(name)(**options)


def backend_class(name: str) -> type[Backend]:
    target = BACKENDS.get(name)
    if target is None:
        import difflib

        guess = difflib.get_close_matches(name, BACKENDS, n=1)
        tip = f"; did you mean '{guess[0]}'?" if guess else ""
        raise UserError(f"unknown backend {name!r}{tip} (available: {', '.join(BACKENDS)})")
    module_name, _, cls_name = target.partition(":")
    module = importlib.import_module(module_name)
    cls: type[Backend] = getattr(module, cls_name)
    return cls
