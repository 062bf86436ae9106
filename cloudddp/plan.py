"""A Plan: everything a backend would send, decided before anything is sent.

``render`` builds it without network or credentials; ``launch`` sends exactly it. What ``cloudddp render``
and ``--dry-run`` print is the plan, so the dry run never differs from the real request.
"""

from __future__ import annotations

import html
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

    def _language(self, name: str) -> str:
        return {"json": "json", "yml": "yaml", "yaml": "yaml", "sh": "bash"}.get(name.rsplit(".", 1)[-1], "text")

    def _repr_markdown_(self) -> str:
        """How a notebook shows a plan: decisions, warnings, estimate, then each document as a code block."""
        parts = [f"**{self.backend}** plan for `{self.job_name}`"]
        parts += [f"- {d}" for d in self.decisions]
        parts += [f"- ⚠️ {w}" for w in self.warnings]
        if self.estimate:
            parts.append("- estimate: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                                   for k, v in self.estimate.items() if v is not None))
        for name, body in self.documents.items():
            parts.append(f"`{name}`\n```{self._language(name)}\n{body.rstrip()}\n```")
        return "\n\n".join(parts)

    def _repr_html_(self) -> str:
        items = "".join(f"<li>{html.escape(d)}</li>" for d in self.decisions)
        items += "".join(f"<li style='color:#b45309'>warning: {html.escape(w)}</li>" for w in self.warnings)
        docs = "".join(
            f"<details open><summary><code>{html.escape(name)}</code></summary><pre>{html.escape(body)}</pre></details>"
            for name, body in self.documents.items()
        )
        return f"<div><b>{html.escape(self.backend)}</b> plan for <code>{html.escape(self.job_name)}</code><ul>{items}</ul>{docs}</div>"

    def __str__(self) -> str:
        return self.text()

    def text(self) -> str:
        """The documents, one after another, headed by their names (what ``render`` prints)."""
        parts = []
        for name, body in self.documents.items():
            parts.append(f"# --- {name}\n{body.rstrip()}\n")
        return "\n".join(parts)
