"""What cloudddp does inside an unchanged script's process so that a stop saves and a resubmit resumes: the part of
the work the script's framework leaves undone or does wrong under a stop that reaches every rank at once.

Shipped in every code snapshot as ``_cloudddp_hooks.py``. The rank launcher (:mod:`cloudddp.injob.shim`) puts a
``sitecustomize.py`` first on the program's ``PYTHONPATH`` (:func:`site_folder`), which loads this file and calls
:func:`install` before the script runs, then runs any ``sitecustomize`` that folder hid (an image's own). Nothing
is imported at that point: :func:`install` only registers what to do *after* a framework's module is imported by
the script itself (a finder on ``sys.meta_path``, :class:`AfterImport`), so a script that never imports Lightning
never loads it, and one that sets ``CUDA_VISIBLE_DEVICES`` or ``HF_HOME`` before its imports keeps that order.

- **DataLoader workers** of any script ignore SIGTERM (:func:`spare_workers`): the rank hears the stop and ends its
  workers itself. On Slurm, ``slurmstepd`` signals every process of a step, workers included, and a worker killed
  by a signal that did not come from its parent crashes the rank (``DataLoader worker ... is killed by signal``)
  before it can save.
- **Lightning** (``lightning`` or ``pytorch_lightning``): :mod:`cloudddp.injob.lightning_stop`.
- **Hugging Face Trainer**: :mod:`cloudddp.injob.transformers_stop`.
- **Hangs**: every process writes its threads' stacks to its errors on :data:`STACK_SIGNAL`, and once the script's
  process group is up, the hang doctor (:mod:`cloudddp.injob.hang`) names the culprit of a collective's timeout.
- **Stragglers**: once ``torch.optim`` is imported, the straggler watch (:mod:`cloudddp.injob.pace`) measures each
  rank's own work per step and names a rank the others keep waiting for.

Both follow one protocol (:class:`Stop`): the SIGTERM handler only notes the stop (it may come twice: Slurm's time
limit and the end of a preemption's grace send another); at the end of a training step, where every rank is at the
same place, the ranks agree on it with one all-reduce (max) on the framework's own device; if any rank heard it,
every rank saves through the framework's own collective save, and the script ends cleanly (exit 0). Nothing
collective and no file is written inside a signal handler.

``CLOUDDDP_FRAMEWORK_HOOKS=off`` in the job's ``env`` leaves the script's process as it is (the launcher then adds
no ``sitecustomize``). A framework version outside :data:`TESTED` gets a warning and the hooks still apply where the
framework has what they patch; where it does not, a warning says what was left alone and the script runs as
written. These hooks never raise into the script: a failure to patch is a warning.

Standard library only at import: it runs in stock images where cloudddp is not installed.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

SHIPPED_AS = "_cloudddp_hooks.py"
LIGHTNING_AS = "_cloudddp_hooks_lightning.py"  # cloudddp/injob/lightning_stop.py
TRANSFORMERS_AS = "_cloudddp_hooks_transformers.py"  # cloudddp/injob/transformers_stop.py
HANG_AS = "_cloudddp_hang.py"  # cloudddp/injob/hang.py
PACE_AS = "_cloudddp_pace.py"  # cloudddp/injob/pace.py
STACK_SIGNAL = int(signal.SIGRTMIN) + 5
"""The signal on which a process of the job writes every thread's stack to its errors (``cloudddp stacks``, the
stall watchdog: :data:`cloudddp.injob.stall.STACK_SIGNAL`, the same number)."""
MODULE = "_cloudddp_hooks"
"""The name this file's module has in the script's process (DataLoader workers started by ``spawn`` or
``forkserver`` import the worker wrapper by it)."""
SWITCH = "CLOUDDDP_FRAMEWORK_HOOKS"
"""``off`` in the job's environment: no hook is installed."""
OFF = ("off", "0", "false", "no")
TAG = "cloudddp:"
TESTED = {"lightning": ("2.5", "2.6"), "transformers": ("5.18", "5.25")}
"""The minor versions the hooks are tested with (docs/stopping.md's table), oldest and newest. Transformers before
5.18 cannot resume a distributed CPU run with torch 2.13 at all (it loads the optimizer onto ``cpu:0``)."""
SITE = '''"""Written by cloudddp's rank launcher: loads its stop hooks, then the sitecustomize this folder hides."""
import importlib.machinery, importlib.util, os, sys

def _cloudddp_load(name, where):
    spec = importlib.util.spec_from_file_location(name, where)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

try:
    _cloudddp_load({module!r}, {hooks!r}).install()
except Exception as e:  # the script runs as written
    print(f"cloudddp: stop hooks not installed: {{e!r}}", file=sys.stderr, flush=True)
_here = os.path.dirname(os.path.abspath(__file__))
_folders = [os.path.abspath(p or ".") for p in sys.path]
_after = sys.path[_folders.index(_here) + 1 :] if _here in _folders else sys.path  # those before ran first
_next = importlib.machinery.PathFinder.find_spec("sitecustomize", _after)
if _next is not None and _next.loader is not None:
    _next.loader.exec_module(importlib.util.module_from_spec(_next))
'''


def site_folder(hooks: Path, private: Path) -> Path:
    """A folder holding the ``sitecustomize.py`` that installs the hooks of the file ``hooks`` (this module, shipped
    or cloudddp's own), under ``private`` (the user's own temporary folder). Written once per content, replaced
    whole: every process of a node may ask at once."""
    import hashlib
    import tempfile

    text = SITE.format(module=MODULE, hooks=str(hooks))
    folder = private / f"site-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    target = folder / "sitecustomize.py"
    if not target.is_file() or target.read_text() != text:
        folder.mkdir(mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".sitecustomize.")
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(tmp, target)
    return folder


def prepare(env: dict[str, str] | Any, private: Path) -> None:
    """Put the hooks' ``sitecustomize`` first on the program's ``PYTHONPATH`` in ``env`` (the launcher's
    environment, which the program inherits), unless the job turned them off."""
    if env.get(SWITCH, "on").lower() in OFF:
        return
    folder = site_folder(Path(__file__).resolve(), private)
    env["PYTHONPATH"] = os.pathsep.join([str(folder), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])


def say(message: str) -> None:
    """A line on the rank's errors, where the launcher and the platform's logs show it."""
    print(f"{TAG} {message}", file=sys.stderr, flush=True)


def say_once(message: str) -> None:
    """:func:`say` on global rank 0 only (every rank would print the same)."""
    if os.environ.get("RANK", "0") == "0":
        say(message)


class Stop:
    """The stop as one rank heard it, and the ranks' agreement on it.

    :meth:`listen` replaces the SIGTERM handler by one that only notes the signal; :meth:`agreed` is called by
    every rank at the same point of a step and says whether any rank heard one."""

    def __init__(self) -> None:
        self.heard = False

    def hear(self, _number: int, _frame: object) -> None:
        self.heard = True

    def listen(self) -> Any:
        """Note SIGTERM from now on; the handler it replaced (None off the main thread, where none can be set)."""
        if threading.current_thread() is not threading.main_thread():
            return None
        return signal.signal(signal.SIGTERM, self.hear)

    def agreed(self, device: Any = None) -> bool:
        """Whether any rank heard the stop: one all-reduce (max) of each rank's note, on ``device`` (the
        framework's; NCCL reduces only CUDA tensors), when a process group of more than one rank is up."""
        import torch
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return self.heard
        flag = torch.tensor([1.0 if self.heard else 0.0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())


STOP = Stop()
"""This process's stop: one per process, whichever framework runs."""


def end_cleanly() -> None:
    """After the stop's save, on every rank: wait for the others, then leave the process group, so gloo's threads
    are not left to the interpreter's exit (which can abort it)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.barrier()
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def end_on_exit() -> None:
    """:func:`end_cleanly` when the interpreter exits (the stop ends the script by ``SystemExit``)."""
    import atexit

    atexit.register(end_cleanly)


def version_note(framework: str, version: str) -> str | None:
    """A warning for a ``framework`` version outside :data:`TESTED`, or None."""
    low, high = TESTED[framework]
    minor = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if len(minor) < 2:
        return f"{framework} {version}: version not understood; the stop hooks apply where they can"
    if minor < _minor(low) or minor > _minor(high):
        return (
            f"{framework} {version} is outside the versions the stop hooks are tested with ({low}–{high}): they "
            f"apply where {framework} has what they patch; check that a stop saves (docs/stopping.md), or set "
            f"{SWITCH}=off"
        )
    return None


def _minor(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


class _Patching(importlib.abc.Loader):
    """A module's own loader, and then ``after`` on the module it made."""

    def __init__(self, loader: Any, after: Callable[[ModuleType], None]) -> None:
        self.loader, self.after = loader, after

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        made: ModuleType | None = self.loader.create_module(spec)
        return made

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader  # the module's own loader again, for whoever reads its source
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        try:
            self.after(module)
        except Exception as e:  # noqa: BLE001 - a hook must never break the script's import
            say(f"not hooking {module.__name__}: {e!r}; it runs as written")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class AfterImport(importlib.abc.MetaPathFinder):
    """Runs a function on a module right after the script's own import of it, once."""

    def __init__(self, hooks: dict[str, Callable[[ModuleType], None]]) -> None:
        self.hooks = dict(hooks)
        self.finding: set[str] = set()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.hooks or fullname in self.finding:
            return None
        self.finding.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self.finding.discard(fullname)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Patching(spec.loader, self.hooks.pop(fullname))
        return spec


def _sibling(shipped_as: str, name: str) -> ModuleType:
    """The module shipped beside this file as ``shipped_as`` (in a snapshot), or cloudddp's own ``name`` beside it
    in the package's folder."""
    here = Path(__file__).resolve().parent
    where = here / shipped_as
    if not where.is_file():
        where = here / f"{name}.py"
    spec = importlib.util.spec_from_file_location(shipped_as.removesuffix(".py"), where)
    if spec is None or spec.loader is None:
        raise ImportError(f"{where} cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _lightning(module: ModuleType) -> None:
    _sibling(LIGHTNING_AS, "lightning_stop").hook(module, STOP)


def _transformers(module: ModuleType) -> None:
    _sibling(TRANSFORMERS_AS, "transformers_stop").hook(module, STOP)


def _hang_doctor(module: ModuleType) -> None:
    _sibling(HANG_AS, "hang").hook(module)


def _pace(module: ModuleType) -> None:
    _sibling(PACE_AS, "pace").hook(module)


def answer_stack_signal() -> None:
    """Write every thread's stack to the errors on :data:`STACK_SIGNAL` and go on (a signal nobody else uses)."""
    import faulthandler

    with contextlib.suppress(RuntimeError, OSError, ValueError):
        faulthandler.register(STACK_SIGNAL, all_threads=True)


# -- DataLoader workers ------------------------------------------------------------------------------------------
_WORKER_LOOP: list[Callable[..., Any]] = []
"""torch's own ``_worker_loop``, once the hook has replaced it."""
INIT_FN = 9
"""The position of ``init_fn`` among ``torch.utils.data._utils.worker._worker_loop``'s arguments."""


class SpareWorker:
    """A DataLoader worker's ``init_fn``: hear SIGTERM only from the rank that started the worker, then run the
    loader's own (Lightning's seeding, the script's).

    A SIGTERM from anyone else (Slurm's ``slurmstepd`` signals every process of a step) is ignored: the rank hears
    the stop and ends its workers itself. Its own SIGTERM is obeyed, as torch's worker handler obeys it (``_exit``
    with 0): the rank sends it to a worker that did not end when asked, and Python's exit sends it to every
    daemonic child before joining them (a persistent worker of a loop left mid-epoch), so a worker deaf to it
    would hang the rank's exit forever. The signal is blocked when this is made, the worker's first step
    (:func:`worker_loop`), before torch's worker installs its own SIGTERM handler (which kills the worker on
    anyone's SIGTERM but its parent's, a worker that has just started included), and read by a thread started
    when torch's loop calls this (``sigwaitinfo`` tells its sender; a Python handler cannot)."""

    def __init__(self, init_fn: Callable[[int], None] | None) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # threads started later inherit the mask
        self.init_fn = init_fn

    def __call__(self, worker_id: int) -> None:
        threading.Thread(target=_obey_the_parent_only, name="cloudddp-worker-sigterm", daemon=True).start()
        if self.init_fn is not None:
            self.init_fn(worker_id)


def _obey_the_parent_only() -> None:
    parent = os.getppid()
    while True:
        if signal.sigwaitinfo({signal.SIGTERM}).si_pid == parent:
            os._exit(0)


def worker_loop(*args: Any, **kwargs: Any) -> Any:
    """torch's ``_worker_loop`` with :class:`SpareWorker` around the loader's ``init_fn``, made before torch's loop
    runs."""
    given = list(args)
    if len(given) > INIT_FN:
        given[INIT_FN] = SpareWorker(given[INIT_FN])
    elif "init_fn" in kwargs:
        kwargs["init_fn"] = SpareWorker(kwargs["init_fn"])
    importlib.import_module("torch.utils.data._utils.worker")  # a spawned worker: the hook sets the original
    return _WORKER_LOOP[0](*given, **kwargs)


def spare_workers(module: ModuleType) -> None:
    """Replace ``torch.utils.data._utils.worker._worker_loop`` (looked up each time a loader starts its workers)."""
    original = getattr(module, "_worker_loop", None)
    if original is None or original is worker_loop:
        return
    _WORKER_LOOP[:] = [original]
    module._worker_loop = worker_loop  # type: ignore[attr-defined]


def install() -> None:
    """Register the hooks (nothing is imported now). A no-op with ``CLOUDDDP_FRAMEWORK_HOOKS=off``."""
    if os.environ.get(SWITCH, "on").lower() in OFF:
        return
    answer_stack_signal()
    hooks: dict[str, Callable[[ModuleType], None]] = {
        "torch.utils.data._utils.worker": spare_workers,
        "torch.distributed.distributed_c10d": _hang_doctor,
        "torch.optim.optimizer": _pace,
    }
    for package in ("lightning.pytorch", "pytorch_lightning"):
        hooks[f"{package}.trainer.trainer"] = _lightning
    hooks["transformers.trainer"] = _transformers
    for name in [n for n in hooks if n in sys.modules]:  # imported already (by an image's sitecustomize)
        hooks.pop(name)(sys.modules[name])
    sys.meta_path.insert(0, AfterImport(hooks))
