"""``{{last_checkpoint:PATTERN}}``: the newest checkpoint a job kept, handed to the script's own resume flag (shipped
as ``_cloudddp_resume_arg.py``; each rank's launcher, :mod:`cloudddp.injob.shim`, expands the program's arguments
with it when the rank starts).

A script that does not load its state by itself (Accelerate's ``load_state``, a plain loop) is told what to load by
an argument, which only the folder's content at the job's start can fill::

    args: [--output_dir, "{{checkpoint_dir}}", --checkpointing_steps, "20",
           --resume_from_checkpoint, "{{last_checkpoint:step_*}}"]

``render`` leaves the placeholder as it is (normalized to ``{{last_checkpoint:PATTERN}}``: braces, a colon and the
pattern's characters, which every backend's transport carries unchanged: shell-quoted in Slurm's script and Azure
ML's command, JSON in SageMaker's base64 payload). When the rank starts, the placeholder becomes:

- the absolute path of the newest complete match of ``PATTERN`` (a glob relative to ``$CLOUDDDP_CHECKPOINT_DIR``):
  a folder that holds something, or a file; names starting with ``.`` or ending in ``.tmp``/``.partial`` (a save on
  its way in) are never chosen. *Newest* is by the numbers in the names when the matches differ only by numbers
  (``step_9`` before ``step_10``), else by modification time (a folder's: its newest entry's);
- empty text when nothing matches (the first run) or with ``checkpoint.resume: never`` (``CLOUDDDP_RESUME``): an
  argument that is exactly the placeholder becomes ``""``, which Hugging Face's ``run_clm_no_trainer.py`` and
  scripts like it (``if args.resume_from_checkpoint:``) read as no checkpoint.

Each rank prints what it was given (:func:`expand`'s notes). It needs nothing but Python's standard library: it runs
in stock images where cloudddp is not installed.
"""

from __future__ import annotations

import glob
import os
import re
import sys
from collections.abc import Mapping
from typing import Any

SHIPPED_AS = "_cloudddp_resume_arg.py"
NAME = "last_checkpoint"
MARK = "{{" + NAME + ":"
"""How every argument that holds the placeholder begins it, once ``render`` has normalized it."""
PLACEHOLDER = re.compile(r"(?<!\$)\{\{\s*" + NAME + r":([^{}\s]*)\s*\}\}")
"""``{{last_checkpoint:PATTERN}}`` (the spaces the spec's placeholders allow inside the braces too)."""
INCOMPLETE = (".tmp", ".partial")
"""The endings of a save on its way in: never handed to a script."""
_NUMBER = re.compile(r"\d+")


def placeholder(pattern: str) -> str:
    """The placeholder's one form, in what every backend sends."""
    return MARK + pattern + "}}"


def problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot name checkpoints inside the checkpoint folder; None when it can."""
    if not pattern:
        return "names no pattern: give a glob relative to the checkpoint folder, e.g. {{last_checkpoint:step_*}}"
    if pattern.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", pattern):
        return f"{pattern!r} is absolute: the pattern is relative to the checkpoint folder ($CLOUDDDP_CHECKPOINT_DIR)"
    if ".." in re.split(r"[/\\]", pattern):
        return f"{pattern!r} leaves the checkpoint folder (..): the pattern names what is inside it"
    return None


def newest(folder: str, pattern: str) -> tuple[str | None, list[str], str]:
    """The newest complete match of ``pattern`` in ``folder`` (its path relative to ``folder``; None when there is
    none), every complete match oldest first, and how they were ordered (``number`` or ``time``)."""
    found = [
        os.path.relpath(path, folder)
        for path in glob.glob(os.path.join(glob.escape(folder), pattern))
        if _complete(path, os.path.relpath(path, folder))
    ]
    if not found:
        return None, [], "number"
    shapes = {_NUMBER.sub("#", name) for name in found}
    if len(shapes) == 1:
        ordered = sorted(found, key=lambda name: ([int(n) for n in _NUMBER.findall(name)], _saved(folder, name), name))
        return ordered[-1], ordered, "number"
    ordered = sorted(found, key=lambda name: (_saved(folder, name), name))
    return ordered[-1], ordered, "time"


def _complete(path: str, name: str) -> bool:
    """A match a script may load: inside the folder, no part hidden, not a save on its way in, a file or a folder
    that holds something (more than hidden or incomplete entries)."""
    if name.startswith("..") or not all(_shown(part) for part in name.replace("\\", "/").split("/")):
        return False
    if os.path.isdir(path):
        try:
            with os.scandir(path) as entries:
                return any(_shown(entry.name) for entry in entries)
        except OSError:
            return False
    return os.path.isfile(path)


def _shown(name: str) -> bool:
    """Not hidden, not a save on its way in."""
    return not name.startswith(".") and not name.endswith(INCOMPLETE)


def _saved(folder: str, name: str) -> float:
    """When a match was saved: a file's modification time; a folder's newest, its own or its entries'."""
    path = os.path.join(folder, name)
    try:
        times = [os.stat(path).st_mtime]
        if os.path.isdir(path):
            with os.scandir(path) as entries:
                times += [entry.stat().st_mtime for entry in entries]
    except OSError:
        return 0.0
    return max(times)


def expand(argv: list[str], checkpoint_dir: str | None, *, never: bool = False) -> tuple[list[str], list[str]]:
    """``argv`` with each ``{{last_checkpoint:PATTERN}}`` replaced by the newest match's absolute path in
    ``checkpoint_dir`` (empty text when nothing matches, or with ``never``: ``checkpoint.resume: never``), and the
    notes to print, one per pattern. A ValueError for a pattern outside the folder, or no folder at all."""
    given: dict[str, str] = {}
    notes: list[str] = []
    for word in argv:
        for pattern in PLACEHOLDER.findall(word):
            if pattern in given:
                continue
            why = problem(pattern)
            if why:
                raise ValueError(f"{placeholder(pattern)}: {why}")
            if not checkpoint_dir:
                raise ValueError(
                    f"{placeholder(pattern)}: no checkpoint folder (CLOUDDDP_CHECKPOINT_DIR is not set): "
                    "the placeholder needs checkpointing on (checkpoint.enabled)"
                )
            given[pattern], note = _one(checkpoint_dir, pattern, never=never)
            notes.append(f"cloudddp: {placeholder(pattern)} {note}")
    expanded = [PLACEHOLDER.sub(lambda m: given[m.group(1)], word) for word in argv]
    return expanded, notes


def _one(folder: str, pattern: str, *, never: bool) -> tuple[str, str]:
    """What one pattern becomes, and the note that says so."""
    if never:
        return "", "is empty: checkpoint.resume is never (CLOUDDDP_RESUME=never), so the script starts from scratch"
    match, found, order = newest(folder, pattern)
    if match is None:
        return "", (
            f"is empty: nothing in {folder} matches {pattern} yet (a first run; or the script saves under other names)"
        )
    path = os.path.join(folder, match)
    by = "by the number in its name" if order == "number" else "by modification time"
    return path, f"= {path} (the newest of {len(found)}, {by})"


def launch(argv: list[Any], environ: Mapping[str, str]) -> list[str]:
    """What the launcher runs: ``argv`` expanded for this rank, each note printed on its errors; a SystemExit
    that says why for a placeholder that cannot be expanded."""
    try:
        expanded, notes = expand(
            [str(word) for word in argv],
            environ.get("CLOUDDDP_CHECKPOINT_DIR"),
            never=environ.get("CLOUDDDP_RESUME") == "never",
        )
    except ValueError as e:
        raise SystemExit(f"{SHIPPED_AS}: {e}") from None
    for note in notes:
        print(note, file=sys.stderr, flush=True)
    return expanded
