"""The stop hooks' own machinery, in real Python processes: the ``sitecustomize`` the launcher puts on the
program's path (it installs the hooks, then runs the ``sitecustomize`` it hides), the off switch, the hook that
runs after the script's own import, the spared DataLoader workers, and the version warning. The frameworks' parts
are proven by stopping real scripts (tests/across_backends/test_unchanged.py and the backends' test_frameworks)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cloudddp.injob import stop_hooks
from tests.support.waiting import LOADED

HOOKS = Path(stop_hooks.__file__)


def run(code: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``code`` run by a fresh Python whose path starts with the hooks' site folder, as the launcher starts it."""
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    environment.update(env)
    stop_hooks.prepare(environment, tmp_path)
    return subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=LOADED)


def test_the_site_folder_installs_the_hooks_and_then_runs_the_sitecustomize_it_hides(tmp_path: Path) -> None:
    hidden = tmp_path / "image"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text("import builtins\nbuiltins.IMAGE_SITE_RAN = True\n")
    code = "import sys, builtins; print(type(sys.meta_path[0]).__name__, getattr(builtins, 'IMAGE_SITE_RAN', False))"
    done = run(code, tmp_path, PYTHONPATH=str(hidden))
    assert done.stdout.split() == ["AfterImport", "True"], done.stderr


def test_off_leaves_the_program_as_it_is(tmp_path: Path) -> None:
    environment = {"PYTHONPATH": "/elsewhere", stop_hooks.SWITCH: "off"}
    stop_hooks.prepare(environment, tmp_path)
    assert environment["PYTHONPATH"] == "/elsewhere" and not list(tmp_path.iterdir())


def test_nothing_is_imported_before_the_script_imports_it(tmp_path: Path) -> None:
    done = run("import sys; print([m for m in ('torch', 'lightning', 'transformers') if m in sys.modules])", tmp_path)
    assert done.stdout.strip() == "[]", done.stderr


def test_a_dataloader_worker_ignores_sigterm_from_others_and_runs_the_loaders_own_init_fn(tmp_path: Path) -> None:
    """A worker signalled by anyone but its parent would die and crash the rank ("DataLoader worker ... is killed
    by signal"): here each worker is sent SIGTERM mid-epoch by another process (``kill``, as slurmstepd sends it)
    and the epoch ends whole, the loader's own ``worker_init_fn`` having run in each worker."""
    code = textwrap.dedent(
        """
        import os, signal, time, torch
        from torch.utils.data import DataLoader, Dataset

        class Slow(Dataset):
            def __len__(self): return 40
            def __getitem__(self, i):
                time.sleep(0.05)
                return i

        def mark(worker_id):
            torch.utils.data.get_worker_info().dataset.marked = True
            print("init", worker_id, flush=True)

        loader = DataLoader(Slow(), batch_size=2, num_workers=2, worker_init_fn=mark)
        seen = []
        for n, batch in enumerate(loader):
            if n == 3:  # every worker, as slurmstepd signals every process of a step
                for worker in __import__("multiprocessing").active_children():
                    __import__("subprocess").run(["kill", "-TERM", str(worker.pid)], check=True)
            seen += batch.tolist()
        print("seen", len(seen), flush=True)
        """
    )
    done = run(code, tmp_path)
    assert "seen 40" in done.stdout and done.stdout.count("init") == 2, done.stdout + done.stderr


def test_a_persistent_worker_left_mid_epoch_still_ends_when_the_rank_exits(tmp_path: Path) -> None:
    """Python's exit sends SIGTERM to every daemonic child and then joins it: a worker deaf to its parent's
    SIGTERM would hang the rank's exit forever (a loop left mid-epoch keeps its persistent workers alive)."""
    code = textwrap.dedent(
        """
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        loader = DataLoader(TensorDataset(torch.randn(256, 4)), batch_size=8, num_workers=2, persistent_workers=True)
        for n, (x,) in enumerate(loader):
            if n == 3:
                break
        print("left the loop", flush=True)
        """
    )
    done = run(code, tmp_path)  # run's own timeout fails it if the exit hangs
    assert done.returncode == 0 and "left the loop" in done.stdout, done.stdout + done.stderr


def test_a_hook_runs_after_the_scripts_own_import_and_a_failing_one_only_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "framework_x.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[int] = []
    finder = stop_hooks.AfterImport({"framework_x": lambda module: seen.append(module.VALUE)})
    sys.meta_path.insert(0, finder)
    try:
        import framework_x  # noqa: F401  (the script's own import)

        assert seen == [1]
        (tmp_path / "framework_y.py").write_text("VALUE = 2\n")
        finder.hooks["framework_y"] = lambda module: 1 / 0  # type: ignore[func-returns-value]
        import framework_y  # the import still works

        assert framework_y.VALUE == 2 and framework_y.__loader__ is not None
    finally:
        sys.meta_path.remove(finder)
        for name in ("framework_x", "framework_y"):
            sys.modules.pop(name, None)


@pytest.mark.parametrize(
    ("framework", "version", "warned"),
    [("lightning", "2.6.6", False), ("lightning", "2.5.0", False), ("lightning", "2.4.0", True),
     ("lightning", "2.7.1", True), ("transformers", "5.25.0", False), ("transformers", "5.18.0", False),
     ("transformers", "4.57.6", True), ("transformers", "6.0.0.dev0", True), ("transformers", "main", True)],
)  # fmt: skip
def test_a_version_outside_the_tested_ones_is_warned_about(framework: str, version: str, warned: bool) -> None:
    assert (stop_hooks.version_note(framework, version) is not None) is warned


def test_the_stop_is_only_noted_in_the_handler() -> None:
    stop = stop_hooks.Stop()
    before = stop.listen()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while not stop.heard and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stop.heard and stop.agreed() is True  # no process group: this rank's note
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_worker_signalled_before_the_loaders_init_fn_runs_is_spared_too(tmp_path: Path) -> None:
    """Slurm signals every process of a step, a worker that has just started included: a SIGTERM from another
    process that lands after torch's worker has set its own handler but before the loader's ``init_fn`` runs waits
    for the spared worker's thread, which ignores it, instead of killing the worker. torch's loop up to ``init_fn``
    is stood in for by its real handler setup, the stranger's ``kill`` and a pause."""
    code = textwrap.dedent(
        """
        import multiprocessing, os, subprocess, time
        from torch.utils.data._utils import signal_handling
        from cloudddp.injob import stop_hooks

        def torchs_loop_until_init_fn(*args, init_fn, **kwargs):
            signal_handling._set_worker_signal_handlers()  # torch's worker: a stranger's SIGTERM kills it
            subprocess.run(["kill", "-TERM", str(os.getpid())], check=True)  # a stranger, in the window
            time.sleep(0.3)
            init_fn(0)
            time.sleep(0.5)
            print("worker alive after the stranger's SIGTERM", flush=True)

        stop_hooks._WORKER_LOOP[:] = [torchs_loop_until_init_fn]
        worker = multiprocessing.get_context("fork").Process(target=stop_hooks.worker_loop, kwargs={"init_fn": None})
        worker.start()
        worker.join(30)
        print("exit code", worker.exitcode, flush=True)
        """
    )
    done = run(code, tmp_path)
    assert "worker alive" in done.stdout and "exit code 0" in done.stdout, done.stdout + done.stderr
