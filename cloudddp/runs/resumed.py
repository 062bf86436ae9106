"""What a run that resumed a checkpoint ends with, said to its person, on every backend.

- A checkpoint that does not fit the model: a failed rank's last lines hold PyTorch's ``load_state_dict`` error
  (``Error(s) in loading state_dict``, ``size mismatch for``, missing or unexpected keys). The run's message
  names the checkpoint folder, the run that wrote it and the way out (``checkpoint.resume: never``, or a
  ``checkpoint.key`` of its own), instead of a bare "user error".
- A training with nothing left: the run succeeded, reported no metric and saved nothing into a folder an earlier
  run had written: it resumed a finished training. Its message says "nothing left to train".

Which run wrote the folder is read from the folder's own record of launches
(:data:`cloudddp.backends.checkpoints.contents.RECORD`) where the folder is on this machine (local, Slurm run from
here); elsewhere the folder is named and the writer is not. The verdict is kept in the run's record once the run
has ended, so asking again reads nothing more.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cloudddp.backends.checkpoints.contents import RECORD
from cloudddp.backends.records import RunRecord
from cloudddp.backends.status import RunState, RunStatus

MISFIT_SIGNS = (
    "Error(s) in loading state_dict",
    "size mismatch for ",
    "Missing key(s) in state_dict",
    "Unexpected key(s) in state_dict",
)
"""What PyTorch prints when a saved state does not fit the model it is loaded into."""
NOTE = "resumed"
"""The run record's info key that keeps the verdict (empty: nothing to say)."""


def misfit_line(lines: Sequence[str]) -> str | None:
    """The first line of ``lines`` that says a saved state did not fit the model; None when none does."""
    for line in lines:
        if any(sign in line for sign in MISFIT_SIGNS):
            return line.strip()
    return None


def explained(status: RunStatus, record: RunRecord | None, any_metric: Callable[[], bool]) -> tuple[RunStatus, str]:
    """``status`` with what its checkpoint explains added to its message, and the verdict to keep in the record
    (``record.info[NOTE]``, reused when there); ``any_metric`` says whether the run reported a metric record."""
    if record is None or not status.state.terminal:
        return status, ""
    note = record.info.get(NOTE)
    if note is None:
        note = _verdict(status, record, any_metric)
    if not note:
        return status, note
    return dataclasses.replace(status, message=f"{note}; {status.message}" if status.message else note), note


def _verdict(status: RunStatus, record: RunRecord, any_metric: Callable[[], bool]) -> str:
    folder = _folder(record.info)
    if folder is None:
        return ""
    failure = status.details.get("failure") or {}
    line = misfit_line(failure.get("log_tail") or []) if status.state is RunState.FAILED else None
    if line is not None:
        return misfit_words(folder, _writer(folder, record), line)
    if status.state is RunState.SUCCEEDED and _finished_before(folder, record) and not any_metric():
        writer = _writer(folder, record)
        by = f" (written by run {writer})" if writer else ""
        return (
            f"nothing left to train: it resumed the finished training in {folder}{by} and trained no step; to train "
            "again from scratch submit with -o checkpoint.resume=never, or give this variant its own checkpoint.key"
        )
    return ""


def misfit_words(folder: str, writer: str | None, line: str) -> str:
    """The message of a run whose resumed checkpoint does not fit its model."""
    by = f", written by run {writer}" if writer else ""
    return (
        f"the checkpoint it resumed does not fit the model: {folder}{by} holds another model's state ({line[:160]}); "
        "to start from scratch submit with -o checkpoint.resume=never (the folder is kept), or give this model its "
        "own checkpoint.key (a folder of its own)"
    )


def _folder(info: dict[str, Any]) -> str | None:
    target = info.get("target")
    folder = target.get("checkpoints") if isinstance(target, dict) else None
    return folder if isinstance(folder, str) and folder else None


def _launches(folder: str) -> list[dict[str, Any]]:
    """The runs launched into ``folder`` as its record lists them, oldest first (empty: not on this machine)."""
    try:
        lines = (Path(folder) / RECORD).read_text(errors="replace").splitlines()
    except OSError:
        return []
    launches = []
    for line in lines:
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("run_id"), str):
            launches.append(data)
    return launches


def _writer(folder: str, record: RunRecord) -> str | None:
    """The run launched into ``folder`` last before this one: the one whose checkpoint this run found."""
    earlier = [d["run_id"] for d in _launches(folder) if d["run_id"] != record.run_id]
    return earlier[-1] if earlier else None


def _finished_before(folder: str, record: RunRecord) -> bool:
    """An earlier run wrote into ``folder`` and this run saved nothing there: it found the training finished."""
    path = Path(folder)
    if _writer(folder, record) is None or not path.is_dir():
        return False
    saved = [f for f in path.rglob("[!.]*") if f.is_file() and f.name != RECORD]
    return bool(saved) and all(f.stat().st_mtime < record.created_at for f in saved)
