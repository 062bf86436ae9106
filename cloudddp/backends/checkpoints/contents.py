"""What a checkpoint folder on this machine holds, read at render: what the run will resume from, said truthfully
for any script, and the arguments of the run that wrote it.

The folder is the training's own (:func:`cloudddp.runtime.checkpoint_key`): resubmits with other arguments or
another size share it. So each launch into it adds a line to :data:`RECORD` beside the checkpoints (written by
cloudddp, never by the script): ``{"run_id", "started", "argv"}``, ``argv`` being the spec's program and
arguments. The run that wrote the newest checkpoint is the last one started before it was saved; the plan says
when its arguments differ from this run's.

What is found, and what the plan may claim about it:

- the shared script's ``ckpt-*.pt`` (with its ``.sha256``): it resumes from the newest, as it always does;
- kept files (``checkpoint.files``, under ``files/``): cloudddp links them back before the program starts, and the
  script resumes only if it loads them, which cloudddp cannot see;
- what ``{{last_checkpoint:PATTERN}}`` in the arguments gives the script (:mod:`cloudddp.injob.resume_arg`, the
  same choice the launcher makes when each rank starts), as the folder stands at render;
- framework checkpoints: Lightning's ``*.ckpt``, Hugging Face's ``checkpoint-N/``, Accelerate's ``checkpoint_N/``
  or a ``save_state`` folder (``random_states_0.pkl``): the script resumes only if it loads them (usually a path
  it is given), which cloudddp cannot see, so the plan names them and says so;
- anything else: named the same way. Hidden names (cloudddp's lock, temporary copies) are left out.

Only the local backend, and Slurm where its commands run on this machine, read a folder at render; on a remote
cluster or a cloud the plan says nothing rather than guess.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from cloudddp.injob import resume_arg
from cloudddp.injob.keepfiles import KEPT, ROOT
from cloudddp.observe.console import safe_name
from cloudddp.spec.model import JobSpec, is_shared_script
from cloudddp.spec.placeholders import last_checkpoint, names_in

RECORD = "cloudddp-runs.jsonl"
"""Beside the checkpoints: one JSON line per run launched into the folder."""
_RECORD_TAIL = 1 << 16
"""The most bytes of :data:`RECORD` read (its newest runs; a line is a few hundred bytes)."""
_DEPTH = 4
"""How deep framework checkpoints are looked for (Lightning's ``lightning_logs/version_0/checkpoints``)."""
_MOST = 5000
"""The most entries looked at: a folder with more is named by what was seen."""
_FRAMEWORK_FOLDER = re.compile(r"^checkpoint[-_]\d+$")
"""Hugging Face Trainer's ``checkpoint-<step>``, Accelerate's automatic ``checkpoint_<n>``."""
_STATE_FILES = ("random_states_0.pkl", "trainer_state.json")
"""A folder holding one of these is a saved state (Accelerate's ``save_state``, a Trainer checkpoint)."""


class Item(NamedTuple):
    """One thing in a checkpoint folder: a checkpoint, a kept file or a saved state, and when it was saved. A named
    tuple: cheaper to define than a frozen dataclass (~1 ms of every render)."""

    name: str
    """Relative to the checkpoint folder (a folder ends with ``/``; a kept file is named as declared)."""
    saved: float
    """Its modification time (a folder: its newest file's)."""


class Given(NamedTuple):
    """What one ``{{last_checkpoint:PATTERN}}`` of the arguments gives the script, as the folder stands."""

    pattern: str
    match: str | None
    """The newest complete match, relative to the checkpoint folder; None: the placeholder is empty."""
    matches: int
    order: str
    """How the newest was told: ``number`` (the numbers in the names) or ``time``."""


@dataclass(frozen=True)
class Found:
    """What the checkpoint folder holds, each group newest first."""

    shared: Item | None
    """The shared script's newest checkpoint."""
    kept: tuple[Item, ...]
    frameworks: tuple[Item, ...]
    others: tuple[Item, ...]
    runs: tuple[tuple[float, tuple[str, ...]], ...]
    """From :data:`RECORD`: when each run launched into the folder started, and its program and arguments."""
    elsewhere: tuple[str, ...] = ()
    """When this folder holds nothing: the job's other checkpoint folders that hold something (another
    ``checkpoint.key``, or a folder keyed by the arguments' digest), newest first."""
    given: tuple[Given, ...] = ()
    """What each ``{{last_checkpoint:PATTERN}}`` of the arguments gives the script."""

    @property
    def newest(self) -> float | None:
        """When the newest thing a run may resume from was saved; None when there is none."""
        items = [*self.kept, *self.frameworks, *self.others, *([self.shared] if self.shared else [])]
        return max((item.saved for item in items), default=None)

    def writer(self) -> tuple[str, ...] | None:
        """The program and arguments of the run that wrote the newest checkpoint (the last one started before
        it was saved); None when nothing is saved or no run recorded itself before."""
        newest = self.newest
        before = [argv for started, argv in self.runs if newest is not None and started <= newest]
        return before[-1] if before else None


NOTHING = Found(shared=None, kept=(), frameworks=(), others=(), runs=())


def look(
    folder: Path, *, shared_script: bool, keeps: bool, siblings: bool = False, patterns: Sequence[str] = ()
) -> Found:
    """What ``folder`` holds (:data:`NOTHING` when it does not exist). The shared script's checkpoints count as
    such only for a run of the shared script, and kept files only for a spec that declares ``checkpoint.files``
    (nothing links them back otherwise): else they are files like any other. With ``siblings`` (a folder cloudddp
    named, ``<job>/<key>``, for a spec that names no ``checkpoint.key``: a named variant's siblings are not its
    own) an empty folder also names the job's other folders that hold checkpoints. ``patterns``: those of the
    arguments' ``{{last_checkpoint:PATTERN}}`` (:func:`patterns_given`), each told what it gives the script."""
    given = tuple(_given(folder, pattern) for pattern in patterns)
    if not folder.is_dir():
        return Found(**{**NOTHING.__dict__, "elsewhere": _elsewhere(folder) if siblings else (), "given": given})
    digests = sorted(folder.glob("ckpt-*.pt.sha256")) if shared_script else []
    shared = Item(digests[-1].name.removesuffix(".sha256"), _mtime(digests[-1])) if digests else None
    frameworks, others = _scan(folder, skip_shared=shared_script, skip_kept=keeps)
    found = Found(
        shared=shared,
        kept=_newest_first(_kept(folder / KEPT)) if keeps else (),
        frameworks=_newest_first(frameworks),
        others=_newest_first(others),
        runs=_runs(folder / RECORD),
        given=given,
    )
    if siblings and found.newest is None:
        return Found(**{**found.__dict__, "elsewhere": _elsewhere(folder)})
    return found


def patterns_given(spec: JobSpec) -> tuple[str, ...]:
    """The patterns of the ``{{last_checkpoint:PATTERN}}`` placeholders the spec's program is given, in order."""
    words = spec.code.command if spec.code.command is not None else spec.code.args
    found = (last_checkpoint(name) for word in words for name in names_in(word))
    return tuple(dict.fromkeys(pattern for pattern in found if pattern is not None))


def _given(folder: Path, pattern: str) -> Given:
    """What ``{{last_checkpoint:pattern}}`` gives the script, with the launcher's own choice."""
    if not folder.is_dir():
        return Given(pattern, None, 0, "number")
    match, matches, order = resume_arg.newest(str(folder), pattern)
    return Given(pattern, match, len(matches), order)


def _elsewhere(folder: Path) -> tuple[str, ...]:
    """The other folders beside ``folder`` (the job's other keys) that hold a file, newest first."""
    try:
        others = [p for p in folder.parent.iterdir() if p.is_dir() and p.name != folder.name and not p.is_symlink()]
    except OSError:
        return ()
    held = [(_mtime(p), str(p)) for p in others if any(f.is_file() and f.name != RECORD for f in p.rglob("[!.]*"))]
    return tuple(path for _when, path in sorted(held, reverse=True))


def _scan(folder: Path, *, skip_shared: bool, skip_kept: bool) -> tuple[list[Item], list[Item]]:
    """Framework checkpoints and other files under ``folder``, cloudddp's own files left out (and the shared
    script's checkpoints and the kept files, when they are named as such)."""
    frameworks: list[Item] = []
    others: list[Item] = []
    seen = 0
    for root, dirs, files in os.walk(folder):
        here = Path(root)
        top = here == folder
        depth = len(here.relative_to(folder).parts)
        for name in sorted(dirs):
            if name.startswith(".") or (top and skip_kept and name == KEPT):
                dirs.remove(name)
            elif _FRAMEWORK_FOLDER.match(name) or any((here / name / f).is_file() for f in _STATE_FILES):
                dirs.remove(name)  # named as one checkpoint, not file by file
                frameworks.append(Item(f"{(here / name).relative_to(folder).as_posix()}/", _newest_in(here / name)))
        if depth >= _DEPTH:
            dirs.clear()
        for name in files:
            if name.startswith(".") or (top and (name == RECORD or (skip_shared and name.startswith("ckpt-")))):
                continue
            item = Item((here / name).relative_to(folder).as_posix(), _mtime(here / name))
            (frameworks if name.endswith(".ckpt") else others).append(item)
        seen += len(files) + len(dirs)
        if seen > _MOST:
            break
    return frameworks, others


def _kept(kept: Path) -> list[Item]:
    """The kept copies of ``checkpoint.files``, named as declared (an absolute path is kept under ``_root``)."""
    if not kept.is_dir():
        return []
    found = []
    for path in kept.rglob("*"):
        if path.is_file() and not path.name.startswith("."):
            rel = path.relative_to(kept).as_posix()
            name = "/" + rel.removeprefix(f"{ROOT}/") if rel.startswith(f"{ROOT}/") else rel
            found.append(Item(name, _mtime(path)))
        if len(found) > _MOST:
            break
    return found


def _runs(record: Path) -> tuple[tuple[float, tuple[str, ...]], ...]:
    """The runs :data:`RECORD` names, oldest first (lines that do not read are left out)."""
    try:
        with record.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - _RECORD_TAIL))
            lines = f.read().decode(errors="replace").splitlines()[1 if size > _RECORD_TAIL else 0 :]
    except OSError:
        return ()
    runs = []
    for line in lines:
        try:
            data = json.loads(line)
            runs.append((float(data["started"]), tuple(str(word) for word in data["argv"])))
        except (ValueError, KeyError, TypeError):
            continue
    return tuple(runs)


def record_line(run_id: str, argv: Sequence[str], started: float) -> bytes:
    """The line a launch adds to :data:`RECORD`."""
    return (json.dumps({"run_id": run_id, "started": started, "argv": list(argv)}) + "\n").encode()


def record_run(folder: Path, run_id: str, argv: Sequence[str]) -> None:
    """Add this run to ``folder``'s :data:`RECORD` (one appended write: launches at once do not tear lines)."""
    fd = os.open(folder / RECORD, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, record_line(run_id, argv, time.time()))
    finally:
        os.close(fd)


def resume_note(found: Found, *, never: bool) -> str:
    """What the run starts from, in words: only what cloudddp sees in the folder, never a resume it cannot see (the
    shared script's alone: it loads its newest checkpoint itself)."""
    if never:
        return _never_note(found)
    notes = []
    if found.shared is not None:
        notes.append(f"resumes from {safe_name(found.shared.name)}")
    notes += [_given_note(given) for given in found.given if given.match is not None]
    if found.kept:
        notes.append(
            f"kept files {_names(found.kept)} (saved {_when(found.kept[0])}) are linked back first: your script "
            "resumes if it loads them"
        )
    if found.frameworks:
        notes.append(
            f"found {_names(found.frameworks)} (saved {_when(found.frameworks[0])}) in the checkpoint folder: "
            "your script resumes if it loads it"
        )
    if found.others:
        notes.append(
            f"the checkpoint folder holds {_names(found.others)} (saved {_when(found.others[0])}): your script "
            "resumes if it loads it"
        )
    empty = [_given_note(given) for given in found.given if given.match is None]
    if notes:
        return "; ".join(notes + empty)
    if found.elsewhere:
        return "; ".join(
            [
                "no checkpoint in this folder: starts from scratch",
                *empty,
                f"other folders of this job hold checkpoints ({', '.join(map(safe_name, found.elsewhere[:3]))}: "
                "another checkpoint.key, or keyed by the arguments as cloudddp did before): to continue one, set "
                "checkpoint.path to it",
            ]
        )
    return "; ".join(["no checkpoint yet: starts from scratch", *empty])


def _given_note(given: Given) -> str:
    """What one ``{{last_checkpoint:PATTERN}}`` gives the script, as the folder stands (each rank's launcher chooses
    again when it starts)."""
    named = resume_arg.placeholder(given.pattern)
    if given.match is None:
        return f'{named} is empty: nothing matches {given.pattern} yet, so your script is given "" (nothing to load)'
    by = "the number in its name" if given.order == "number" else "modification time"
    return (
        f"{named} gives your script {safe_name(given.match)} (the newest of {given.matches} by {by}; chosen again "
        "when each rank starts): it resumes if it loads what that argument names"
    )


def _never_note(found: Found) -> str:
    """``checkpoint.resume: never``: kept files are removed and the shared script starts over; a script's own
    checkpoints stay, and only the script decides whether it loads them."""
    note = "starts from scratch (checkpoint.resume: never"
    if found.kept:
        note += "; the kept files are removed first"
    if found.given:
        note += f'; {", ".join(resume_arg.placeholder(given.pattern) for given in found.given)} is given as ""'
    own = (*found.frameworks, *found.others)
    if own:
        return f"{note}): the folder holds {_names(own)}, which your script loads unless it heeds CLOUDDDP_RESUME=never"
    return note + ")"


def arguments_warning(found: Found, argv: Sequence[str]) -> str | None:
    """A warning when the run will resume a checkpoint written with other arguments; None when they are the same,
    nothing is saved, or no run recorded its arguments."""
    was = found.writer()
    if was is None or tuple(was) == tuple(argv):
        return None
    return (
        "the arguments differ from those that wrote the checkpoint it will resume "
        f"(was: {shlex.join(was)}, now: {shlex.join(argv)}): fine for the same training (more epochs, a resume "
        "path); a variant (another learning rate, model or dataset) needs its own name or checkpoint.key"
    )


def _names(items: Sequence[Item], most: int = 3) -> str:
    shown = ", ".join(safe_name(item.name) for item in items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


def _when(item: Item) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(item.saved))


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _newest_in(folder: Path) -> float:
    """When a saved state was saved: its newest file's modification time (the folder's own, when it holds none)."""
    files = [path for path in folder.iterdir() if path.is_file()]
    return max((_mtime(path) for path in files), default=_mtime(folder))


def _newest_first(items: list[Item]) -> tuple[Item, ...]:
    return tuple(sorted(items, key=lambda item: (-item.saved, item.name)))


def resume_notes(spec: JobSpec) -> list[str]:
    """For a script other than the shared one (which checkpoints by itself), what makes a resubmit resume: its own
    saves, only where they outlive the run, and its own load (a path ``{{last_checkpoint:PATTERN}}`` gives it)."""
    return [*_saves_note(spec), *_given_notes(spec)]


def _saves_note(spec: JobSpec) -> list[str]:
    files = spec.checkpoint.files
    if files:
        return [
            f"checkpoint.files ({', '.join(files)}): before the program starts, on every node, each resolves into "
            "the checkpoint folder ($CLOUDDDP_CHECKPOINT_DIR/files, a link; a pattern's files are linked when "
            "kept and saved when new), so what your script saves there is there again on a resubmit: it resumes "
            "if it loads them"
        ]
    if not spec.checkpoint.enabled or is_shared_script(spec):
        return []
    given = [w for w in (*(spec.code.command or ()), *spec.code.args) if "checkpoint_dir" in names_in(w)]
    if given:
        return [
            f"your script is given the checkpoint folder ({given[0]}): what it saves there, a resubmit finds; "
            "what it writes in its working folder is discarded with the run"
        ]
    return [
        "your script: a resubmit resumes only if your script writes to $CLOUDDDP_CHECKPOINT_DIR (or "
        "{{checkpoint_dir}} in code.args) or declares checkpoint.files; what it writes in its working folder is "
        "discarded with the run"
    ]


def _given_notes(spec: JobSpec) -> list[str]:
    """What ``{{last_checkpoint:PATTERN}}`` in the arguments becomes, for every backend: chosen as each rank starts."""
    patterns = patterns_given(spec) if spec.checkpoint.enabled else ()
    if not patterns:
        return []
    named = ", ".join(resume_arg.placeholder(pattern) for pattern in patterns)
    return [
        f"{named}: as each rank starts, its launcher puts the path of the newest complete match in the "
        'checkpoint folder ($CLOUDDDP_CHECKPOINT_DIR) in its place, or "" when nothing matches (the first run) or '
        "with checkpoint.resume: never; the rank's log says which: your script resumes if it loads what it is given"
    ]
