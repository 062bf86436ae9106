"""Lightning's part of a stop, done for an unchanged script (shipped as ``_cloudddp_hooks_lightning.py``; loaded by
:mod:`cloudddp.injob.stop_hooks` once the script imports ``lightning.pytorch.trainer.trainer`` or
``pytorch_lightning.trainer.trainer``).

What Lightning does on its own, and what is done instead (read in Lightning 2.6.6):

- Its SIGTERM handler (``_SignalConnector``) broadcasts from rank 0 inside the handler (since 2.5.2), while its loop
  broadcasts once a step: with every rank signalled at once the two pair up wrongly and the ranks wait until the
  SIGKILL. Here ``register_signal_handlers`` keeps what it sets but SIGTERM, whose handler only notes the stop
  (:class:`~cloudddp.injob.stop_hooks.Stop`).
- It saves nothing on a stop. A callback, added to every ``Trainer`` the script makes, checks at the end of each
  optimizer step whether any rank heard the stop (one all-reduce), and if so every rank saves with
  ``trainer.save_checkpoint`` — as ``last.ckpt`` where the script's ``ModelCheckpoint(save_last=...)`` keeps it,
  so ``fit(ckpt_path="last")`` finds it, else as ``cloudddp-stop.ckpt`` in ``$CLOUDDDP_CHECKPOINT_DIR``, which the
  callback (an ``OnExceptionCheckpoint``) names as a ``"last"`` candidate too — and the fit ends as Lightning ends
  it on SIGTERM (``SIGTERMException``: a clean exit, status 0). Not ``trainer.should_stop``: that runs validation
  and marks the epoch done, so the resume would skip the rest of the interrupted epoch.
- Resumed mid-epoch with a loader that keeps no state (a plain ``DataLoader``), Lightning restarts the epoch's data
  from its first batch and trains only as many batches as were left: the first ones twice, the last ones never.
  Here the epoch's iterator is made again (after the sampler's epoch is set) and the batches already trained are
  drawn and dropped, so each sample is trained once, in the uninterrupted run's order (``DistributedSampler``'s
  order is a function of its seed and the epoch). A resume that starts a new epoch (a stop on an epoch's last step)
  has its iterator made again too: Lightning made it before it set the sampler's epoch. A loader with
  ``state_dict`` (torchdata's ``StatefulDataLoader``) resumes itself and is left alone; one whose length is unknown
  cannot be skipped exactly, and the resume says how many batches are trained again.
- Resumed from a checkpoint saved at an epoch's last batch (a stop heard on the epoch's last step), Lightning counts
  that epoch as done but keeps treating the run as restarted mid-epoch: the next epoch is never counted as started
  (nor are its ``on_train_epoch_start`` hooks called), so a second stop within it saves a checkpoint that reads as
  one saved at that epoch's start, and its resume trained the epoch's finished batches again. Here the run is no
  longer a restart once that epoch is counted done.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

STOP_FILE = "cloudddp-stop.ckpt"
"""The stop's checkpoint in ``$CLOUDDDP_CHECKPOINT_DIR`` when the script keeps no ``last.ckpt`` of its own."""


def hook(trainer_module: ModuleType, stop: Any) -> None:
    """Patch the Lightning package that ``trainer_module`` (``<package>.trainer.trainer``) belongs to."""
    hooks = _hooks_module()
    package = trainer_module.__name__.removesuffix(".trainer.trainer")
    top = importlib.import_module(package.split(".")[0])
    version = str(getattr(top, "__version__", "?"))
    note = hooks.version_note("lightning", version)
    if note:
        hooks.say_once(note)
    signals = importlib.import_module(f"{package}.trainer.connectors.signal_connector")
    loop = importlib.import_module(f"{package}.loops.training_epoch_loop")
    fit = importlib.import_module(f"{package}.loops.fit_loop")
    callbacks = importlib.import_module(f"{package}.callbacks")
    exceptions = importlib.import_module(f"{package}.utilities.exceptions")
    _quiet_sigterm(signals._SignalConnector, stop)
    _skip_trained_batches(loop._TrainingEpochLoop, hooks)
    _start_the_epoch_after_a_finished_one(fit._FitLoop)
    stopping = _stopping_callback(callbacks, exceptions.SIGTERMException, stop, hooks)
    _add_to_every_trainer(trainer_module.Trainer, stopping)
    hooks.say_once(
        f"Lightning {version}: a stop saves a checkpoint at the step every rank reaches and ends the fit "
        f"({hooks.SWITCH}=off leaves Lightning as it is)"
    )


def _hooks_module() -> Any:
    import sys

    return sys.modules["_cloudddp_hooks"]


def _quiet_sigterm(connector: Any, stop: Any) -> None:
    """Lightning's handlers as it sets them, but SIGTERM's: only noted."""
    original = connector.register_signal_handlers

    def register_signal_handlers(self: Any) -> None:
        original(self)
        stop.listen()

    connector.register_signal_handlers = register_signal_handlers


def _add_to_every_trainer(trainer: Any, stopping: type) -> None:
    original = trainer.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.callbacks.append(stopping())

    trainer.__init__ = __init__


def _stopping_callback(callbacks: ModuleType, stopped: type, stop: Any, hooks: Any) -> type:
    """The callback class: an ``OnExceptionCheckpoint`` (a ``"last"`` candidate) where the job has a checkpoint
    folder to resume from, a plain ``Callback`` otherwise."""
    folder = os.environ.get("CLOUDDDP_CHECKPOINT_DIR")
    resumes = bool(folder) and os.environ.get("CLOUDDDP_RESUME", "auto") != "never"
    base = callbacks.OnExceptionCheckpoint if resumes else callbacks.Callback

    class CloudDDPStop(base):  # type: ignore[misc, valid-type]
        """Saves and ends the fit at the first step end after any rank heard the stop."""

        def __init__(self) -> None:
            if resumes:
                super().__init__(folder, STOP_FILE.removesuffix(".ckpt"))
            else:
                super().__init__()

        def on_train_batch_end(self, trainer: Any, pl_module: Any, *_: Any, **__: Any) -> None:
            accumulating = getattr(trainer.fit_loop.epoch_loop, "_should_accumulate", lambda: False)()
            if accumulating or not stop.agreed(pl_module.device):
                return
            path = self._where(trainer, callbacks.ModelCheckpoint)
            trainer.save_checkpoint(path)
            hooks.say(f"stopped at step {trainer.global_step}: saved {path}")
            hooks.end_on_exit()
            raise stopped

        def _where(self, trainer: Any, model_checkpoint: Any) -> str:
            """The script's ``last.ckpt`` (its ``ModelCheckpoint`` made the next resume find it), else ours."""
            for found in trainer.checkpoint_callbacks:
                if isinstance(found, model_checkpoint) and found.save_last and found.dirpath:
                    path: str = os.path.join(found.dirpath, found.CHECKPOINT_NAME_LAST + found.FILE_EXTENSION)
                    if trainer.is_global_zero and os.path.islink(path):  # save_last="link": never through the link
                        os.unlink(path)
                    found.last_model_path = path  # its state says so: the resumed run writes its next one here
                    return path
            return os.path.join(folder or trainer.default_root_dir, STOP_FILE)

        def on_exception(self, *_: Any, **__: Any) -> None:
            """Nothing: an error on one rank is not a stop every rank agreed on."""

        def state_dict(self) -> dict[str, Any]:
            return {}

    return CloudDDPStop


def _start_the_epoch_after_a_finished_one(loop: Any) -> None:
    """After ``reset`` has counted the interrupted epoch as done (its checkpoint was saved at its last batch), the
    run is no longer restarted mid-epoch: the next epoch is counted as started, with its hooks (see the module's
    docstring). A Lightning without restart stages (before 2.5) is left as it is."""
    if not hasattr(loop, "reset_restart_stage"):
        return
    original = loop.reset

    def reset(self: Any) -> None:
        original(self)
        epochs = self.epoch_progress.total
        if self.restarted_mid_epoch and epochs.completed == epochs.ready:
            self.reset_restart_stage()

    loop.reset = reset


def _skip_trained_batches(loop: Any, hooks: Any) -> None:
    """On the first epoch of a resume, make the epoch's iterator again, now that the sampler's epoch is set, and draw
    and drop the batches the interrupted epoch had trained.

    Lightning makes the loader's iterator before it sets the sampler's epoch, and on a resume does not make it
    again: a loader with workers has drawn its indices by then, so a resume that starts a new epoch (a stop on an
    epoch's last step) would train epoch 0's order. Lightning 2.5.0 has no ``is_resuming`` (2.5.6 has); it makes
    the iterator again itself on every first epoch of a resume but a restarting one."""
    original = loop.on_run_start

    def on_run_start(self: Any, data_fetcher: Any) -> None:
        original(self, data_fetcher)
        done = self.batch_progress.current.ready
        resumed = self.restarting or getattr(self.trainer.fit_loop, "is_resuming", False)
        if not (resumed and (done or self.trainer.current_epoch)):
            return
        loaders = self.trainer.fit_loop._combined_loader.flattened
        if all(hasattr(d, "state_dict") and hasattr(d, "load_state_dict") for d in loaders):
            return  # a stateful loader resumes itself
        if getattr(data_fetcher, "length", None) is None or getattr(data_fetcher, "batches", None):
            if done:
                hooks.say_once(
                    f"resumed mid-epoch after {done} batches; the loader's length is unknown, so this epoch's data "
                    f"starts over: its first {done} batches per rank are trained again"
                )
            return
        iter(data_fetcher)  # this epoch's order: the sampler's epoch is set by now
        data_fetcher.fetched = done
        for _ in range(done):
            next(data_fetcher.iterator)
        if done:
            hooks.say_once(f"resumed mid-epoch: the {done} batches per rank this epoch had trained are skipped")

    loop.on_run_start = on_run_start
