"""Two extension points of the Azure ML backend, read from the environment when no credential or transport is
passed in code — so every process that builds the backend with its defaults (the CLI, a recovery watcher,
a notebook) gets them:

``CLOUDDDP_AZURE_CREDENTIAL=module:attr``
    A class or factory, called with no arguments, that returns an azure-core ``TokenCredential``: e.g.
    ``azure.identity:AzureCliCredential`` to sign in with ``az login`` only, instead of
    ``DefaultAzureCredential``'s chain (environment, managed identity, CLI, ...).
``CLOUDDDP_AZURE_TRANSPORT=module:factory``
    A factory, called with no arguments, that returns an azure-core ``HttpTransport``, used for every
    request to Azure ML and to the workspace's storage: e.g. a ``RequestsTransport`` whose session goes
    through a corporate proxy or trusts a private CA.

``attr`` may be dotted (``mypkg.auth:Factory.create``). A value that cannot be used is a user error naming
the variable; the module is imported only when the backend first talks to Azure, never at render.
"""

from __future__ import annotations

import functools
import importlib
import os
from typing import Any

from cloudddp.errors import UserError

CREDENTIAL = "CLOUDDDP_AZURE_CREDENTIAL"
TRANSPORT = "CLOUDDDP_AZURE_TRANSPORT"


def _made_from(variable: str, what: str) -> Any | None:
    """The object the factory named by ``variable`` returns, or None when the variable is not set."""
    value = os.environ.get(variable, "").strip()
    if not value:
        return None
    hint = f"set {variable} to module:attribute (a {what} factory importable here), or unset it"
    module_name, sep, attr = value.partition(":")
    if not sep or not module_name or not attr:
        raise UserError(f"{variable}={value!r} is not module:attribute", hint=hint)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise UserError(f"{variable}={value!r}: cannot import {module_name}: {e}", hint=hint) from None
    try:
        factory = functools.reduce(getattr, attr.split("."), module)
    except AttributeError:
        raise UserError(f"{variable}={value!r}: {module_name} has no {attr}", hint=hint) from None
    if not callable(factory):
        raise UserError(f"{variable}={value!r}: {attr} is not callable", hint=hint)
    try:
        return factory()
    except Exception as e:  # noqa: BLE001 - whatever the user's factory raises is reported, not a traceback
        raise UserError(f"{variable}={value!r}: {attr}() failed: {type(e).__name__}: {e}", hint=hint) from None


def credential_from_environment() -> Any | None:
    """The credential ``CLOUDDDP_AZURE_CREDENTIAL`` names, or None."""
    credential = _made_from(CREDENTIAL, "credential")
    if credential is not None and not (hasattr(credential, "get_token") or hasattr(credential, "get_token_info")):
        raise UserError(
            f"{CREDENTIAL}: {type(credential).__name__} is not an azure-core TokenCredential (it has no get_token)",
            hint="name a credential class such as azure.identity:AzureCliCredential",
        )
    return credential


def transport_from_environment() -> Any | None:
    """The transport ``CLOUDDDP_AZURE_TRANSPORT`` names, or None."""
    transport = _made_from(TRANSPORT, "transport")
    if transport is None:
        return None
    from azure.core.pipeline.transport import HttpTransport

    if not isinstance(transport, HttpTransport):
        raise UserError(
            f"{TRANSPORT}: {type(transport).__name__} is not an azure-core HttpTransport",
            hint="return e.g. azure.core.pipeline.transport.RequestsTransport(session=...)",
        )
    return transport
