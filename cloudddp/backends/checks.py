"""What a backend checks before a launch: preflight checks, and the settings a spec lacks, all said at once; and a
platform's refusal of a launch for quota or capacity, said the same way by every backend."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cloudddp.errors import UserError


@dataclass(frozen=True)
class Check:
    """One preflight check: ``ok`` is True (passed), False (failed) or None (could not be checked)."""

    name: str
    ok: bool | None
    detail: str = ""
    fix: str = ""
    """What to do when it failed."""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail, "fix": self.fix}


class PreflightFailed(UserError):
    """Preflight checks failed: the job was not launched."""

    def __init__(self, checks: list[Check]) -> None:
        self.checks = checks
        lines = [f"{c.name}: {c.detail}" + (f"\n    fix: {c.fix}" if c.fix else "") for c in checks]
        super().__init__("preflight checks failed; fix them or pass --skip-checks:\n  " + "\n  ".join(lines))


class RefusedForCapacity(UserError):
    """The platform refused the submission for want of quota or capacity for the size (Azure ML refuses a serverless
    job whose VM family has too little quota): nothing was launched, and a recovery that can move takes the next size
    or backend at once."""


@dataclass(frozen=True)
class MissingSetting:
    """A setting the backend needs that neither the spec nor the environment gives."""

    field: str
    """Where it goes in the spec, ``sagemaker.role``."""
    what: str
    """What it is, for a person who has not met it yet."""
    example: str
    """A value of the right form, ready to edit."""
    env: str | None = None
    """The environment variable that can give it instead."""
    needed_to_render: bool = True
    """False: only ``submit`` needs it (the workspace to send to); ``validate -b`` still reports it."""
    stand_in: str | None = None
    """A placeholder ``plan`` may use to rank sizes without it (the plan then says so); None: plans need it."""

    def line(self) -> str:
        also = f", or {self.env} in the environment" if self.env else ""
        return f"{self.field}: {self.what} (e.g. {self.example}{also})"


class SettingsMissing(UserError):
    """A backend's settings the spec lacks, all of them in one message, with a snippet to paste."""

    def __init__(self, backend: str, missing: list[MissingSetting]) -> None:
        self.problems = [m.line() for m in missing]
        count = f"{len(missing)} setting{'s' if len(missing) != 1 else ''}"
        snippet: dict[str, list[str]] = {}
        for m in missing:
            section, _, key = m.field.partition(".")
            snippet.setdefault(section, []).append(f"    {key}: {m.example}")
        paste = "\n".join(f"  {section}:\n" + "\n".join(keys) for section, keys in snippet.items())
        super().__init__(
            f"the {backend} backend needs {count} the spec does not give:\n  - " + "\n  - ".join(self.problems),
            hint="add them to the job spec (or give them with -o, or keep them for every job in your user "
            f"configuration: docs/configuration.md), for example:\n{paste}",
        )
