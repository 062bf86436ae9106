"""Secret values: kept out of every plan, log, run record and error, filled in only at launch.

The spec's environment is rendered once, here: plain values as they are, secret and ``from_env`` values as
placeholders with their :class:`~cloudddp.plan.EnvSource`, which :meth:`cloudddp.plan.Plan.reveal` resolves
when the request is sent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from cloudddp.plan import MIN_SECRET_CHARS, SECRET_PLACEHOLDER, EnvSource
from cloudddp.spec.model import JobSpec


def rendered_env(spec: JobSpec) -> tuple[dict[str, str], dict[str, EnvSource]]:
    """The spec's environment as a plan shows it, and where each placeholder's value comes from."""
    env: dict[str, str] = {}
    sources: dict[str, EnvSource] = {}
    for name, entry in spec.env.items():
        if entry.secret or entry.from_env is not None:
            source = EnvSource(name, var=entry.from_env, value=entry.value, secret=entry.secret)
            sources[name] = source
            env[name] = source.placeholder
        else:
            env[name] = entry.value or ""
    return env, sources


def redaction_forms(values: Iterable[str]) -> list[str]:
    """Every form in which a secret value may reach output: the value, each of its lines (a PEM key is printed
    line by line), and the JSON and repr escapes of each (``\\n``, ``\\u00e9``, quotes); longest first, so a
    longer form is replaced before a part of it. Pieces under :data:`MIN_SECRET_CHARS` are left alone (a
    whole secret that short is refused before launch)."""
    forms: set[str] = set()
    for value in values:
        for piece in {value, *(line.strip() for line in value.splitlines())}:
            if len(piece) >= MIN_SECRET_CHARS:
                forms |= {
                    piece,
                    json.dumps(piece)[1:-1],
                    json.dumps(piece, ensure_ascii=False)[1:-1],
                    repr(piece)[1:-1],
                }
    return sorted(forms, key=len, reverse=True)


_SGR = r"(?:(?:\x1b|\\u001b|\\x1b|\\033)\[[0-9;:]*m)*"
"""Colour and style sequences, which a terminal shows (so logs keep them) but which are invisible: a secret
printed with one between its characters (``sec\x1b[0mret``) reads whole on the screen; so do its JSON- and
repr-escaped forms (``sec\\u001b[0mret``) to whoever reads them."""


def redact(text: str, forms: Iterable[str]) -> str:
    """``text`` with each of ``forms`` (see :func:`redaction_forms`) replaced by ``***``, also where colour
    sequences split it."""
    for form in forms:
        text = text.replace(form, "***")
        if "\x1b" in text or "1b[" in text or "033[" in text:
            text = re.sub(_SGR.join(map(re.escape, form)), "***", text)
    return text


def redacted_spec_data(spec: JobSpec) -> dict[str, Any]:
    """The spec as data, with secret values replaced: safe to store next to a run."""
    data = spec.model_dump(mode="json", exclude_defaults=True)
    for name, entry in spec.env.items():
        if entry.secret and entry.value is not None:
            data["env"][name]["value"] = SECRET_PLACEHOLDER.format(name=name)
    return data
