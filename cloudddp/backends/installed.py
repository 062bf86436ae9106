"""What the installed distributions register in the entry-point groups a cloudddp process reads: its backends
(``cloudddp.backends``), the commands they contribute to the command line (``cloudddp.commands``) and pydantic's
plugins (``pydantic``).

Scanning every installed distribution's metadata for them costs tens of milliseconds, and a short command such
as ``render`` would pay it more than once (for the backends, then inside pydantic at its first model). So one scan
reads every group, and what it found is kept in ``$CLOUDDDP_HOME/cache/entry-points.json`` under a key of the
installed distributions (the modification times of the folders on ``sys.path``: installing or removing a
distribution changes its folder's); a changed key scans again. :func:`load` imports what an entry names. With
the cache current, ``importlib.metadata`` (and the email parser it loads) is not imported at all: see
:func:`spare_pydantic_plugin_scan`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import json
import os
import sys
import types
from typing import Any, ClassVar

from cloudddp.errors import UserError
from cloudddp.paths import home

BACKENDS = "cloudddp.backends"
COMMANDS = "cloudddp.commands"
"""Commands a distribution adds to ``cloudddp`` (name -> ``module:attr`` of a click command)."""
PYDANTIC_PLUGINS = "pydantic"
GROUPS = (BACKENDS, COMMANDS, PYDANTIC_PLUGINS)


def _installed_key() -> str:
    """What changes when a distribution is installed or removed: each ``sys.path`` folder and its mtime."""
    stamps = []
    for entry in sys.path:
        with contextlib.suppress(OSError):
            stamps.append(f"{entry}:{os.stat(entry or '.').st_mtime_ns}")
    return hashlib.sha256("\n".join(stamps).encode()).hexdigest()[:16]


def _scan() -> dict[str, dict[str, str]]:
    """``{group: {name: "module:attr"}}`` of :data:`GROUPS`, from the installed distributions' metadata."""
    from importlib.metadata import entry_points  # ~12 ms with its email parser: only when the cache is stale

    found: dict[str, dict[str, str]] = {group: {} for group in GROUPS}
    for group in GROUPS:
        for ep in entry_points(group=group):
            found[group].setdefault(ep.name, ep.value)  # the first on sys.path wins, as for imports
    return {group: dict(sorted(entries.items())) for group, entries in found.items()}


@functools.cache
def _groups() -> dict[str, dict[str, str]]:
    cache = home() / "cache" / "entry-points.json"
    key = _installed_key()
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
        kept = json.loads(cache.read_text())
        if kept["key"] == key:
            return {group: {str(k): str(v) for k, v in kept["groups"][group].items()} for group in GROUPS}
    found = _scan()
    with contextlib.suppress(OSError):
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"key": key, "groups": found}))
        os.replace(tmp, cache)
    return found


def entry_points(group: str) -> dict[str, str]:
    """``{name: "module:attr"}`` of one of :data:`GROUPS`, sorted by name, from the cache when it is current."""
    return dict(_groups()[group])


PYDANTIC_LOADER = "pydantic.plugin._loader"
"""Pydantic's module that scans for its plugins: it imports ``importlib.metadata`` to, ~20 ms of a short command."""


class _NoPydanticPlugins(types.ModuleType):
    """Stands in for :data:`PYDANTIC_LOADER` where no pydantic plugin is installed: its ``get_plugins`` (the one
    name pydantic takes from that module) finds none, as pydantic's own scan would, without ``importlib.metadata``.
    A name it does not have (a later pydantic asking for more) loads pydantic's module in its place."""

    _plugins: ClassVar[dict[str, Any]] = {}  # what pydantic's module holds after a scan that found nothing

    @staticmethod
    def get_plugins() -> tuple[()]:
        return ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # the import system asking what kind of module this is
            raise AttributeError(name)
        del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), name)


def spare_pydantic_plugin_scan() -> None:
    """Tell pydantic that no plugin is installed, when none is, before its first model scans for them.

    Before pydantic has loaded its plugin loader, :class:`_NoPydanticPlugins` takes that module's place; once it
    has, its cache (``_plugins``, None until it scans) is set to the empty dict its own scan returns when the group
    is empty. With a plugin installed, or once pydantic has scanned, nothing is changed and pydantic scans as usual.
    """
    if entry_points(PYDANTIC_PLUGINS):
        return
    loader = sys.modules.get(PYDANTIC_LOADER)
    if loader is None:
        sys.modules[PYDANTIC_LOADER] = _NoPydanticPlugins(PYDANTIC_LOADER)
    elif getattr(loader, "_plugins", {}) is None:
        loader._plugins = {}  # type: ignore[attr-defined]


def load(what: str, name: str, entry: str) -> Any:
    """The object ``entry`` (``module:attr``) names, registered as ``what`` ``name``; a UserError when it cannot be
    loaded (the distribution that registered it is broken, not cloudddp)."""
    module_name, _, attr = entry.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise UserError(
            f"{what} {name!r} is registered as {entry!r} but cannot be loaded: {e}",
            hint="reinstall the package that provides it",
        ) from None
