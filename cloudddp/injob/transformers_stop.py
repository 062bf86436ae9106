"""Hugging Face Trainer's part of a stop, done for an unchanged script (shipped as
``_cloudddp_hooks_transformers.py``; loaded by :mod:`cloudddp.injob.stop_hooks` once the script imports
``transformers.trainer``).

The Trainer has no SIGTERM handling of its own (read in transformers 5.25.0; its opt-in ``enable_jit_checkpoint``
saves per rank, without the ranks agreeing on a step): a stop kills it, and the resume goes back to its last
``save_steps`` checkpoint. Here:

- While ``Trainer.train`` runs, SIGTERM only notes the stop (:class:`~cloudddp.injob.stop_hooks.Stop`); a callback
  added to every Trainer (``transformers.trainer.DEFAULT_CALLBACKS``, which each Trainer reads when it is made)
  asks at each optimizer step's end whether any rank heard it (one all-reduce on the Trainer's device) and if so
  makes the Trainer save ``checkpoint-<step>`` in its own format (``should_save``: whatever ``save_strategy`` says)
  and stop, with no evaluation first. Once the checkpoint is written the script ends (exit 0), so what it does
  after training (a final save, an evaluation, a push) does not eat the grace.
- ``train()`` called without ``resume_from_checkpoint``, for a Trainer whose ``output_dir`` is inside the job's
  checkpoint folder (``CLOUDDDP_CHECKPOINT_DIR``, with ``checkpoint.resume: auto``), resumes from the newest
  complete ``checkpoint-N`` there (one that has its ``trainer_state.json``, the last file the Trainer writes).
  Today's ``run_clm.py`` passes only what ``--resume_from_checkpoint`` says; older ones found it themselves.
  The Trainer's resume is exact: it skips the interrupted epoch's trained batches and restores each rank's RNG.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import ModuleType
from typing import Any

CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
STATE = "trainer_state.json"


def hook(trainer_module: ModuleType, stop: Any) -> None:
    """Patch ``transformers.trainer``: a stopping callback for every Trainer, and the resume."""
    import sys

    hooks = sys.modules["_cloudddp_hooks"]
    import transformers

    version = str(getattr(transformers, "__version__", "?"))
    note = hooks.version_note("transformers", version)
    if note:
        hooks.say_once(note)
    defaults = getattr(trainer_module, "DEFAULT_CALLBACKS", None)
    if not isinstance(defaults, list):
        hooks.say_once(f"transformers {version} has no DEFAULT_CALLBACKS list: a stop is not saved by cloudddp")
        return
    base = trainer_module.TrainerCallback
    defaults.append(_stopping_callback(base, stop, hooks))
    _resume_and_listen(trainer_module.Trainer, stop, hooks)
    hooks.say_once(
        f"transformers {version}: a stop saves the Trainer's checkpoint at the step every rank reaches and ends "
        f"the script ({hooks.SWITCH}=off leaves the Trainer as it is)"
    )


def _stopping_callback(base: Any, stop: Any, hooks: Any) -> type:
    class CloudDDPStop(base):  # type: ignore[misc]
        """Saves and stops at the first step end after any rank heard the stop; ends the script once saved."""

        stopping = False

        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
            if stop.agreed(args.device):
                self.stopping = True
                control.should_save, control.should_training_stop = True, True
                control.should_evaluate = False  # an evaluation first would eat the grace
            return control

        def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
            if not self.stopping:
                return control
            hooks.say(f"stopped at step {state.global_step}: saved checkpoint-{state.global_step} in {args.output_dir}")
            hooks.end_cleanly()
            raise SystemExit(0)

    return CloudDDPStop


def _resume_and_listen(trainer: Any, stop: Any, hooks: Any) -> None:
    original = trainer.train

    def train(self: Any, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        if resume_from_checkpoint is None:
            resume_from_checkpoint = newest_complete(self.args.output_dir)
            if resume_from_checkpoint is not None:
                hooks.say_once(f"the Trainer resumes from {resume_from_checkpoint}, the newest complete checkpoint")
        before = stop.listen()
        try:
            return original(self, resume_from_checkpoint, *args, **kwargs)
        finally:
            if before is not None:
                import signal

                signal.signal(signal.SIGTERM, before)

    trainer.train = train


def newest_complete(output_dir: str | None) -> str | None:
    """The newest ``checkpoint-N`` with its ``trainer_state.json`` in ``output_dir``, where that folder is inside
    the job's checkpoint folder and the job resumes (``CLOUDDDP_RESUME`` not ``never``); else None."""
    kept = os.environ.get("CLOUDDDP_CHECKPOINT_DIR")
    if not output_dir or not kept or os.environ.get("CLOUDDDP_RESUME", "auto") == "never":
        return None
    folder = Path(output_dir).resolve()
    if not folder.is_relative_to(Path(kept).resolve()) or not folder.is_dir():
        return None
    found = [
        (int(match.group(1)), entry)
        for entry in folder.iterdir()
        if (match := CHECKPOINT.match(entry.name)) and (entry / STATE).is_file()
    ]
    return str(max(found)[1]) if found else None
