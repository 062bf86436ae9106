"""Secret values: kept out of every plan, log, registry row and error, filled in only at launch.

The spec's environment is rendered once, here: plain values as they are, secret and ``from_env`` values as
placeholders with their :class:`~cloudddp.plan.EnvSource`, which :meth:`cloudddp.plan.Plan.reveal` resolves
when the request is sent.
"""

from __future__ import annotations

from typing import Any

from cloudddp.plan import SECRET_PLACEHOLDER, EnvSource
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
