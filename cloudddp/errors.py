"""Errors that reach the user, each with the exit code the CLI gives it.

A user mistake (a bad spec, a bad argument, a missing credential) is a :class:`UserError` and exits 2
with a message and no traceback. A run that fails is a :class:`RunFailed` and exits 1.
"""

from __future__ import annotations


class CloudDDPError(Exception):
    """Base of every error cloudddp raises on purpose."""

    exit_code = 1


class UserError(CloudDDPError):
    """Bad input: the message says what is wrong and what to do. Exit code 2."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def __str__(self) -> str:
        text = super().__str__()
        return f"{text}\nhint: {self.hint}" if self.hint else text


class SpecError(UserError):
    """A job spec that does not validate. ``problems`` holds one line per problem."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        shown = problems[:12]
        more = len(problems) - len(shown)
        lines = [f"{source}: {len(problems)} problem{'s' if len(problems) != 1 else ''} in the job spec"]
        lines += [f"  - {p}" for p in shown]
        if more:
            lines.append(f"  ... and {more} more")
        super().__init__("\n".join(lines))


class BackendUnavailable(UserError):
    """A backend whose optional dependencies or credentials are missing."""


class RunNotFound(UserError):
    """No run with that id in this machine's run database or at the backend."""


class RunFailed(CloudDDPError):
    """The training run ended in failure. Exit code 1."""


class Declined(CloudDDPError):
    """The person asked before a launch said no: nothing was sent (exit 1)."""
