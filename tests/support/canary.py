"""Canary secrets and the search for them: after a real submit, every file, object, request and output is
searched for every form in which a secret's value could have been written.

A search that finds nothing proves something only if it would have found the value: :func:`leaks` is checked
on text that holds each form (``tests/project/test_proof.py``), and each cloud test also finds the value in the one
place it must be (the job's environment in the request that creates the job).
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import tarfile
import urllib.parse
from collections.abc import Iterable, Iterator
from pathlib import Path

from cloudddp.runs.database import RunDatabase

TOKEN = "canary-token-7f3a9c1e5b2d"
"""A one-line secret, given to a job from the shell (``env.X.from_env``)."""
PEM = (
    "-----BEGIN CANARY PRIVATE KEY-----\n"
    "Q2FuYXJ5TGluZU9uZS0xYjJjM2Q0ZQ\n"
    "Q2FuYXJ5TGluZVR3by05Zjg3NmU1ZA\n"
    "-----END CANARY PRIVATE KEY-----"
)
"""A multi-line secret (a PEM-like key): each of its lines is searched for on its own too."""
QUOTED = 'canary-"qu\'o\\ted"-sécret-4e1c'
"""A secret whose JSON- and repr-escaped forms differ from it (quotes, a backslash, non-ASCII): a request body or a
log that escapes it shows none of its raw text."""
ENVIRONMENT = {"CANARY_TOKEN_SRC": TOKEN, "CANARY_PEM_SRC": PEM, "CANARY_QUOTED_SRC": QUOTED}
"""The shell variables that hold the canaries."""
SPEC_ENV = {
    "API_TOKEN": {"from_env": "CANARY_TOKEN_SRC", "secret": True},
    "SIGNING_KEY": {"from_env": "CANARY_PEM_SRC", "secret": True},
    "DB_PASSWORD": {"from_env": "CANARY_QUOTED_SRC", "secret": True},
}
"""The spec's ``env`` section: the three secrets, read from the shell at launch (never written in the spec)."""
SENT = {"API_TOKEN": TOKEN, "SIGNING_KEY": PEM, "DB_PASSWORD": QUOTED}
"""What the job's environment must hold once it runs."""


def forms(values: Iterable[str] = (TOKEN, PEM, QUOTED)) -> list[str]:
    """Every form of each value a leak could take: whole, each line, JSON- (ASCII or not) and repr-escaped,
    URL-quoted (a query string, a form body) and base64 (an encoded payload)."""
    found: set[str] = set()
    for value in values:
        for piece in {value, *(line for line in value.splitlines() if line.strip())}:
            found |= {
                piece,
                json.dumps(piece)[1:-1],
                json.dumps(piece, ensure_ascii=False)[1:-1],
                repr(piece)[1:-1],
                urllib.parse.quote(piece, safe=""),
                urllib.parse.quote_plus(piece),
            }
        found.add(base64.b64encode(value.encode()).decode().rstrip("="))
    return sorted(found, key=len, reverse=True)


FORMS = forms()


def leaks(data: bytes | str, where: str) -> list[str]:
    """``where: form`` for each canary form in ``data``; for a gzip stream or a tar archive, in what it holds."""
    raw = data.encode() if isinstance(data, str) else data
    found = [f"{where}: {form!r}" for form in FORMS if form.encode() in raw]
    for name, inner in _unpacked(raw):
        found += leaks(inner, f"{where} -> {name}")
    return found


def _unpacked(raw: bytes) -> Iterator[tuple[str, bytes]]:
    """The members of a (gzipped) tar archive, or the content of a gzip stream; nothing for other data."""
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError):
            return
        try:
            with tarfile.open(fileobj=io.BytesIO(raw)) as archive:
                for member in archive.getmembers():
                    handle = archive.extractfile(member) if member.isfile() else None
                    if handle is not None:
                        yield member.name, handle.read()
            return
        except tarfile.TarError:
            yield "(gunzipped)", raw


def files_leaking(*roots: Path) -> list[str]:
    """Every canary form in every file under ``roots`` (archives searched inside)."""
    found: list[str] = []
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
            found += leaks(path.read_bytes(), str(path))
    return found


def searched_files(*roots: Path) -> int:
    """How many files :func:`files_leaking` searched (a search of nothing proves nothing)."""
    return sum(1 for root in roots for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def argv_leaking(pid: int) -> list[str]:
    """Every canary form in a live process's command line (what ``ps`` shows every user)."""
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    assert cmdline, f"process {pid} has ended: its command line cannot be searched"
    return leaks(cmdline, f"argv of {pid}")


def budget_looks(run_id: str) -> int:
    """How many times the budget watch of ``run_id`` has looked (lines in its log); 0 until the watcher that
    launched the run has registered it (a cloud rig can show the job a moment before that)."""
    record = RunDatabase().get(run_id)
    log = Path(record.info.get("budget", {}).get("log", "/nonexistent")) if record is not None else None
    return len(log.read_text().splitlines()) if log is not None and log.is_file() else 0
