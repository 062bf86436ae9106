"""The registered backends: found through the ``cloudddp.backends`` entry-point group, imported when used.

A backend is registered by any installed distribution, cloudddp's own included::

    [project.entry-points."cloudddp.backends"]
    slurm = "mypkg.slurm:SlurmBackend"

Only names are read to list them (``cloudddp backends``, ``--backend`` help, completion); a backend's
module is imported when the backend is used, and imports its cloud SDK only where it talks to the cloud.
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING, Any

from ..errors import UserError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from .base import Backend

GROUP = "cloudddp.backends"


@functools.cache
def _entry_points() -> dict[str, EntryPoint]:
    from importlib.metadata import entry_points

    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=GROUP):
        found.setdefault(ep.name, ep)  # the first on sys.path wins, as for imports
    return dict(sorted(found.items()))


def names() -> list[str]:
    """Every registered backend's name, sorted."""
    return list(_entry_points())


def backend_class(name: str) -> type[Backend[Any]]:
    """The class registered as ``name``; a UserError with a did-you-mean for an unknown name."""
    from .base import Backend

    entry = _entry_points().get(name)
    if entry is None:
        import difflib

        guess = difflib.get_close_matches(name, names(), n=1)
        tip = f"; did you mean '{guess[0]}'?" if guess else ""
        raise UserError(
            f"unknown backend {name!r}{tip} (registered: {', '.join(names()) or 'none'})",
            hint=f"`cloudddp backends` lists them; a plugin registers in the entry-point group {GROUP!r}",
        )
    try:
        module_name, _, attr = entry.value.partition(":")
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise UserError(
            f"backend {name!r} is registered as {entry.value!r} but cannot be loaded: {e}",
            hint="reinstall the package that provides it",
        ) from None
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise UserError(f"backend {name!r} ({entry.value}) is not a cloudddp Backend subclass")
    if cls.name != name:
        raise UserError(f"backend registered as {name!r} calls itself {cls.name!r}; the two must agree")
    return cls


def backend_classes() -> list[type[Backend[Any]]]:
    return [backend_class(name) for name in names()]


def get_backend(name: str, **options: Any) -> Backend[Any]:
    """The backend called ``name``, constructed with its own options (e.g. a credential for a cloud)."""
    return backend_class(name)(**options)
