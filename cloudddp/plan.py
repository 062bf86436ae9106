"""A Plan: everything a backend would send, decided before anything is sent.

``render`` builds it without network or credentials; ``launch`` sends exactly it. What ``cloudddp render``
and ``--dry-run`` print is the plan, so the dry run never differs from the real request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .spec import JobSpec

SECRET_PLACEHOLDER = "<secret:{name}>"


@dataclass
class Plan:
    backend: str
    job_name: str
    request: dict[str, Any]
    """The native request, with secret values replaced by placeholders."""
    documents: dict[str, str] = field(default_factory=dict)
    """File name -> text, as the backend's own tools read them (job YAML, request JSON, argv)."""
    decisions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    estimate: dict[str, Any] | None = None
    uploads: list[dict[str, Any]] = field(default_factory=list)
    """What is uploaded before the request (content-addressed: unchanged snapshots are skipped)."""
    spec: JobSpec | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "job_name": self.job_name,
            "request": self.request,
            "documents": self.documents,
            "decisions": self.decisions,
            "warnings": self.warnings,
            "estimate": self.estimate,
            "uploads": self.uploads,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    def text(self) -> str:
        """The documents, one after another, headed by their names (what ``render`` prints)."""
        parts = []
        for name, body in self.documents.items():
            parts.append(f"# --- {name}\n{body.rstrip()}\n")
        return "\n".join(parts)
