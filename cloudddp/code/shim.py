"""cloudddp's launcher inside a job: runs the job's program as the spec says, where a platform cannot.

This file is shipped inside every code snapshot as ``_cloudddp_launch.py``. A platform's launcher starts
it once per process instead of the job's program::

    python _cloudddp_launch.py --cloudddp-00 <part> [--cloudddp-01 <part> ...] [-- program args...]

The parts, joined in order, are one JSON document::

    {"argv": [...], "python": true, "env": {...}, "metrics": [{"name": ..., "regex": ...}],
     "requirements": {"file": "requirements.txt", "digest": "..."}}

- ``argv`` (or the arguments after ``--``) is the job's program, run with exactly those arguments
  (``python`` first when ``"python"`` is true). SageMaker's training toolkit, for one, turns
  hyperparameters into ``--key value`` pairs after decoding each value as JSON, in sorted order, so
  positional arguments, flags, repeated options and values such as ``0.10`` or ``"a b"`` would not
  survive it; its ``mpirun`` (smddp) forwards only a fixed list of environment variables to ranks on
  other hosts, so what a rank must know travels here, in its argv.
- ``env`` is set over what the platform set (the spec wins, NCCL settings included).
- ``metrics``: the metrics the job declares by regular expression. The program then runs as a child
  whose output is copied through line by line; on rank 0 each line a pattern matches is also logged to
  MLflow when the platform names a tracking server (``MLFLOW_TRACKING_URI``; Azure ML sets it and the
  run, ``MLFLOW_RUN_ID``), so Azure ML Studio shows a script's own metrics. Without ``metrics`` this file
  replaces itself with the program (same process id), so the platform's launcher supervises it directly.
- ``requirements``: the job's requirements file, for a platform that does not install it (Azure ML). The
  first process of a node installs it into an environment made for it in the node's temporary folder (in a
  folder private to the user, checked before it is trusted),
  layered over this Python (its packages first, then this Python's: torch is not installed twice), under a
  file lock, so the other processes of the node wait and reuse it; the program then runs with that
  environment's ``python`` (first on ``PATH`` too, for a ``code.command``).

It needs nothing but Python's standard library (and mlflow only where the image has it), because it
runs in stock images where cloudddp is not installed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

FLAG = "--cloudddp-"
SHIPPED_AS = "_cloudddp_launch.py"


def read_payload(args: list[str]) -> dict[str, Any]:
    """The JSON document carried by ``--cloudddp-NN <part>`` arguments (up to ``--``); other arguments are
    ignored (a platform may add its own). The program after ``--``, if any, is the payload's ``argv``."""
    parts: dict[int, str] = {}
    i = 0
    while i < len(args):
        key = args[i]
        if key == "--":
            break
        if key.startswith(FLAG) and key[len(FLAG) :].isdigit() and i + 1 < len(args):
            parts[int(key[len(FLAG) :])] = args[i + 1]
            i += 2
        else:
            i += 1
    if not parts or sorted(parts) != list(range(len(parts))):
        raise SystemExit(f"{SHIPPED_AS}: expected --cloudddp-00 ... arguments, got {args!r}")
    payload = json.loads("".join(parts[n] for n in sorted(parts)))
    if not isinstance(payload, dict):
        raise SystemExit(f"{SHIPPED_AS}: the payload is not a JSON object")
    if i < len(args):  # after --
        payload["argv"], payload["python"] = args[i + 1 :], False
    return payload


def command(payload: dict[str, Any], python: str = sys.executable) -> list[str]:
    """The argv to run: the job's program, started the way this file was (``-m mpi4py`` kept)."""
    argv = [str(a) for a in payload["argv"]]
    if not payload.get("python"):
        return argv
    if "mpi4py.run" in sys.modules:  # this file was started as `python -m mpi4py` (smddp)
        return [python, "-m", "mpi4py", *argv]
    return [python, *argv]


def layer_over_this_python(python: Path) -> None:
    """Make the environment of ``python`` see this Python's packages after its own: a ``.pth`` line that
    adds this Python's site folders the way ``site`` does (their own ``.pth`` files, editable installs
    included, are honoured). A venv's ``--system-site-packages`` would not do: it sees the base
    interpreter's packages, not those of the environment this Python runs in."""
    import sysconfig

    own = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    folders = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    line = "import site; " + "; ".join(f"site.addsitedir({folder!r})" for folder in folders)
    (Path(own) / "_cloudddp_layer.pth").write_text(line + "\n")


def private_folder() -> Path:
    """Where this user's job environments go on this node: ``<tmp>/cloudddp-<uid>``, created 0700 and used only
    while it is a real folder of this user's that nobody else may enter (a fixed name in a shared /tmp could be
    made first by someone else, with an environment of their choosing in it); otherwise a fresh private folder
    for this process alone."""
    import stat

    base = Path(tempfile.gettempdir()) / f"cloudddp-{os.getuid()}"
    try:
        os.mkdir(base, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(base)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077:
        return base
    print(f"{SHIPPED_AS}: not using {base}: it is not this user's alone", file=sys.stderr, flush=True)
    return Path(tempfile.mkdtemp(prefix="cloudddp-env-"))


def environment_for(listing: str, digest: str) -> str:
    """The ``python`` of this node's environment for the requirements in ``listing``, built by the first
    process that gets here (the others wait on the lock, then reuse it)."""
    import fcntl
    import venv

    root = private_folder() / f"env-{digest}"
    python = root / "bin" / "python"
    with open(f"{root}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / ".installed").is_file():
            print(f"{SHIPPED_AS}: installing {listing} into {root}", file=sys.stderr, flush=True)
            venv.EnvBuilder(with_pip=False, clear=True).create(root)
            layer_over_this_python(python)
            pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
            done = subprocess.run([*pip, "--disable-pip-version-check", "-r", listing])
            if done.returncode != 0:
                raise SystemExit(f"{SHIPPED_AS}: could not install the job's requirements ({listing})")
            (root / ".installed").write_text("")
    return str(python)


class Metrics:
    """Declared metrics read from the program's output and logged to MLflow (rank 0, when configured)."""

    def __init__(self, declared: list[dict[str, str]]) -> None:
        self.patterns = [(d["name"], re.compile(d["regex"])) for d in declared]
        rank = os.environ.get("RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or "0"
        self.active = rank == "0" and bool(os.environ.get("MLFLOW_TRACKING_URI"))
        self.records = 0
        self.mlflow: Any = None

    def read(self, line: str) -> None:
        if not self.active:
            return
        values: dict[str, float] = {}
        for name, pattern in self.patterns:
            match = pattern.search(line)
            if match:
                try:
                    values[name] = float(match.group(1))
                except (IndexError, ValueError):
                    continue
        if values:  # `step` and `epoch` are positions, as cloudddp reads them: the step is the first found
            self.records += 1
            step, epoch = values.pop("step", None), values.pop("epoch", None)
            position = step if step is not None else epoch if epoch is not None else self.records
            if values:
                self.log(values, int(position))

    def log(self, values: dict[str, float], step: int) -> None:
        try:
            if self.mlflow is None:
                import mlflow

                self.mlflow = mlflow
            self.mlflow.log_metrics(values, step=step)
        except Exception as e:  # noqa: BLE001 - metrics must never stop training
            print(f"{SHIPPED_AS}: not logging metrics to MLflow: {e}", file=sys.stderr, flush=True)
            self.active = False


def run_teed(argv: list[str], metrics: Metrics) -> int:
    """Run ``argv`` as a child, copy its output through, read metrics from it; its exit code."""
    child = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=1, text=True, errors="replace"
    )
    for sig in (signal.SIGTERM, signal.SIGINT):  # a cancel or preemption reaches the program
        signal.signal(sig, lambda number, _frame: child.send_signal(number))
    assert child.stdout is not None
    for line in child.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        metrics.read(line)
    return child.wait()


def main() -> None:
    payload = read_payload(sys.argv[1:])
    os.environ.update({str(k): str(v) for k, v in payload.get("env", {}).items()})
    python = sys.executable
    if payload.get("requirements"):
        python = environment_for(payload["requirements"]["file"], payload["requirements"]["digest"])
        os.environ["PATH"] = f"{Path(python).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    argv = command(payload, python)
    if payload.get("metrics"):
        code = run_teed(argv, Metrics(payload["metrics"]))
        if code < 0:  # killed by a signal: end the same way, so the platform sees what happened
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        sys.exit(code)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main()
