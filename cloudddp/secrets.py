"""Secret values: kept out of every plan, log, registry row and error, filled in only at launch."""

from __future__ import annotations

import os
from typing import Any

from .errors import UserError
from .plan import SECRET_PLACEHOLDER
from .spec import JobSpec


def rendered_env(spec: JobSpec) -> dict[str, str]:
    """The spec's environment as a plan shows it: secrets and ``from_env`` values as placeholders."""
    out: dict[str, str] = {}
    for name, entry in spec.env.items():
        if entry.secret:
            out[name] = SECRET_PLACEHOLDER.format(name=name)
        elif entry.from_env is not None:
            out[name] = f"<from_env:{entry.from_env}>"
        else:
            out[name] = entry.value or ""
    return out


def resolved_env(spec: JobSpec, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The real values, read at launch; a missing ``from_env`` variable is a user error naming it."""
    environ = os.environ if environ is None else environ
    out: dict[str, str] = {}
    missing = []
    for name, entry in spec.env.items():
        if entry.from_env is not None:
            if entry.from_env not in environ:
                missing.append(f"env.{name} reads ${entry.from_env}, which is not set in this shell")
                continue
            out[name] = environ[entry.from_env]
        else:
            out[name] = entry.value or ""
    if missing:
        raise UserError("; ".join(missing), hint="export the variable before submitting, or give env.<NAME>.value")
    return out


def secret_values(spec: JobSpec, environ: dict[str, str] | None = None) -> list[str]:
    """Every secret value this spec can resolve to (for redaction), longest first."""
    environ = os.environ if environ is None else environ
    values = []
    for entry in spec.env.values():
        if not entry.secret:
            continue
        value = entry.value if entry.value is not None else environ.get(entry.from_env or "")
        if value:
            values.append(value)
    return sorted(values, key=len, reverse=True)


def redact(text: str, secrets: list[str]) -> str:
    for value in secrets:
        if len(value) >= 4:
            text = text.replace(value, "***")
    return text


def redacted_spec_data(spec: JobSpec) -> dict[str, Any]:
    """The spec as data, with secret values replaced: safe to store next to a run."""
    data = spec.model_dump(mode="json", exclude_defaults=True)
    for name, entry in spec.env.items():
        if entry.secret and entry.value is not None:
            data["env"][name]["value"] = SECRET_PLACEHOLDER.format(name=name)
    return data
