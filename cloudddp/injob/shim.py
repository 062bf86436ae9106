"""cloudddp's launcher inside a job: runs the job's program as the spec says, where a platform cannot.

This file is shipped inside every code snapshot as ``_cloudddp_launch.py``. A platform's launcher starts
it once per process instead of the job's program::

    python _cloudddp_launch.py --cloudddp-00 <part> [--cloudddp-01 <part> ...] [-- program args...]

The parts, joined in order, are one JSON document, or its standard base64 (what SageMaker sends: the
training toolkit up to 5.1.2 joins the command line and runs it through ``/bin/sh``, which strips quotes
from raw JSON; base64 has no character the shell changes)::

    {"argv": [...], "python": true, "env": {...}, "metrics": [{"name": ..., "regex": ...}],
     "requirements": {"file": "requirements.txt", "digest": "..."}}

- ``argv`` (or the arguments after ``--``) is the job's program, run with exactly those arguments (``python``
  first when ``"python"`` is true). SageMaker's toolkit turns hyperparameters into sorted ``--key value`` pairs of
  JSON-decoded values (positional arguments, flags, ``0.10`` or ``"a b"`` would not survive it), and its ``mpirun``
  forwards a fixed list of variables to other hosts: what a rank must know travels here, in its argv.
- ``env`` is set over what the platform set (the spec wins, NCCL settings included); ``unset`` names
  variables the platform set that the program must not get (SageMaker's forced ``NCCL_PROTO``).
- ``metrics``: the metrics the job declares by regular expression. The program's output is copied through in whole
  lines (a progress bar's ``\\r`` updates as its latest state: :class:`Lines`); on rank 0 each line a pattern
  matches is also logged to MLflow when the platform names a tracking server (``MLFLOW_TRACKING_URI``; Azure ML
  sets it and the run, ``MLFLOW_RUN_ID``), so Azure ML Studio shows a script's own metrics; a declared ``epoch``
  is logged as the metric ``epoch`` and a declared ``step`` as MLflow's step (where none is declared the run's tag
  ``cloudddp.step`` says ``none`` and MLflow's step only counts the records), so both keep their meaning when
  cloudddp reads them back. MLflow's "View run at" lines are off for the program too.
- ``preload``: modules the script's own process imports before the script runs (smddp's client, which registers
  its process-group backend), through ``_cloudddp_preload.py`` (:mod:`cloudddp.injob.preload`).
- ``tag``: prefix each line the program prints with its global rank (``[rank3]:``, as torchrun's
  ``--log-line-prefix-template`` would), for a platform whose logs do not say which process printed a line
  (SageMaker: one stream per host, both ranks and the toolkit mixed).
- ``keep``: the job's ``checkpoint.files``: before the program starts each declared path is made to resolve into
  ``$CLOUDDDP_CHECKPOINT_DIR/files`` by the keeper shipped beside this file (``_cloudddp_keep.py``, see
  ``cloudddp/injob/keepfiles.py``); files that replaced their link are saved while it runs and when it ends.
- ``stops``: ``platform`` where the platform signals every process of the job itself (Slurm's steps); otherwise
  the first SIGTERM or SIGINT this process gets is passed on to the program.
- ``requirements``: the job's requirements file, for a platform that does not install it (Azure ML). The
  first process of a node installs it into an environment in the user's private temporary folder, layered over
  this Python (torch is not installed twice), under a file lock the node's other processes wait on; the program
  runs with that environment's ``python`` (first on ``PATH`` too, for a ``code.command``).

A Python program gets cloudddp's stop hooks (:mod:`cloudddp.injob.stop_hooks`) by a ``sitecustomize`` on its path.
Where the environment carries ``CLOUDDDP_PREFLIGHT``, every rank takes part in the interconnect pre-flight
(:mod:`cloudddp.injob.interconnect`, shipped beside this file) before the program starts, which stops the job when a
size chosen for its InfiniBand/EFA runs over sockets.

The program always runs as this process's child, in a process group of its own (:func:`start_program`): a
launcher's stop (torchrun's ``killpg``) then reaches this process alone, which passes it on to the program once,
and never to the program's DataLoader workers, which a signal from anyone but their parent kills.

Under an MPI launcher (``mpirun``: Azure ML's MPI distribution) it sets the torch.distributed variables from
Open MPI's (:mod:`cloudddp.injob.mpi_env`, shipped beside this file), so every program sees the same runtime contract
as under torchrun.

On SageMaker the container's PID 1 is cloudddp's init (:mod:`cloudddp.injob.container_init`), which passes a stop
on to torchrun's agent, which started the processes of this file, or under Open MPI to these processes themselves.

It needs nothing but Python's standard library (and mlflow only where the image has it), because it
runs in stock images where cloudddp is not installed.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

FLAG = "--cloudddp-"
SHIPPED_AS = "_cloudddp_launch.py"
RANK_TAG = "[rank{rank}]:"
"""The prefix of each line a program's process prints, where the launcher adds one: its global rank."""
LINES_SHIPPED_AS = "_cloudddp_lines.py"
"""The line discipline (:mod:`cloudddp.injob.output_lines`), shipped beside this file in every snapshot."""
PRELOAD_AS = "_cloudddp_preload.py"  # cloudddp/injob/preload.py, shipped beside this file
HOOKS_AS = "_cloudddp_hooks.py"  # cloudddp/injob/stop_hooks.py, and its framework modules beside it
RESUME_AS = "_cloudddp_resume_arg.py"  # cloudddp/injob/resume_arg.py: {{last_checkpoint:PATTERN}} in the argv
MPI_AS = "_cloudddp_mpi.py"  # cloudddp/injob/mpi_env.py: the torch.distributed variables under mpirun
INTERCONNECT_AS = "_cloudddp_interconnect.py"  # cloudddp/injob/interconnect.py: the pre-flight
REQUESTS_AS = "_cloudddp_stack_requests.py"  # cloudddp/injob/stack_requests.py: the ranks' stacks on request
PREFLIGHT = "CLOUDDDP_PREFLIGHT"  # what turns it on (cloudddp.injob.interconnect.SETTING)
RANK_LINE = re.compile(r"\[rank(\d+)\]:")
"""A line's rank prefix, as this launcher and torchrun's ``--log-line-prefix-template`` write it."""


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
    payload = json.loads(decode("".join(parts[n] for n in sorted(parts))))
    if not isinstance(payload, dict):
        raise SystemExit(f"{SHIPPED_AS}: the payload is not a JSON object")
    if i < len(args):  # after --
        payload["argv"], payload["python"] = args[i + 1 :], False
    return payload


def decode(text: str) -> str:
    """The payload's JSON text from its parts joined: raw JSON as is, anything else read as base64."""
    if text.lstrip().startswith("{"):
        return text
    try:
        return base64.b64decode(text.encode("ascii"), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeError, ValueError) as e:
        raise SystemExit(f"{SHIPPED_AS}: the payload is neither JSON nor base64 ({e})") from None


def command(payload: dict[str, Any], python: str = sys.executable) -> list[str]:
    """The argv to run: the job's program, started the way this file was (``-m mpi4py`` kept)."""
    argv = [str(a) for a in payload["argv"]]
    if not payload.get("python"):
        return argv
    if payload.get("preload"):  # modules the script's own process imports first (cloudddp/injob/preload.py)
        here = Path(__file__).resolve().parent
        runner = here / PRELOAD_AS if (here / PRELOAD_AS).is_file() else here / "preload.py"
        argv = [str(runner), *payload["preload"], "--", *argv]
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
    process that gets here (the others wait on the lock, then reuse it). It is kept per requirements and per base
    Python: it sees the base's packages, so one made over another Python (a removed venv) would lack them."""
    import fcntl
    import venv

    base = hashlib.sha256(os.path.realpath(sys.executable).encode()).hexdigest()[:12]  # it layers over this Python
    root = private_folder() / f"env-{digest}-{base}"
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


STEP_TAG = "cloudddp.step"
"""The MLflow run tag that says ``none`` when the job declares no ``step``: MLflow's step then only counts."""


def rank() -> str:
    """This process's global rank (torchrun's ``RANK``; under MPI, set from Open MPI's before this is asked)."""
    return os.environ.get("RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or "0"


class Metrics:
    """Declared metrics read from the program's output and logged to MLflow (global rank 0, when configured)."""

    def __init__(self, declared: list[dict[str, str]]) -> None:
        self.patterns = [(d["name"], re.compile(d["regex"])) for d in declared]
        self.steps = any(d["name"] == "step" for d in declared)
        self.active = rank() == "0" and bool(os.environ.get("MLFLOW_TRACKING_URI")) and bool(declared)
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
        if set(values) - {"step", "epoch"}:  # a measurement (a position alone is none, as cloudddp reads it)
            step = values.pop("step", None)  # MLflow's step; the epoch stays a metric named `epoch`
            self.log(values, int(step) if step is not None else self.records)
            self.records += 1

    def log(self, values: dict[str, float], step: int) -> None:
        try:
            if self.mlflow is None:
                import mlflow

                self.mlflow = mlflow
                if not self.steps:
                    mlflow.set_tag(STEP_TAG, "none")
            self.mlflow.log_metrics(values, step=step)
        except Exception as e:  # noqa: BLE001 - metrics must never stop training
            print(f"{SHIPPED_AS}: not logging metrics to MLflow: {e}", file=sys.stderr, flush=True)
            self.active = False


def start_program(argv: list[str]) -> subprocess.Popen[bytes]:
    """Start the job's program as this process's child, in a process group of its own, to die with this process,
    its output and errors piped here (:func:`follow` copies them on as whole lines).

    A launcher stops its worker (this process) by signalling the worker's whole process group: torchrun's agent
    does ``killpg``. In the group of its own the program and its DataLoader workers are out of that reach, so the
    program hears a stop only from :class:`StopForwarder`, its parent, once; a DataLoader worker signalled by
    anyone but its parent dies and crashes the program before it can save. When the launcher kills this process
    (SIGKILL after its shutdown timeout), the kernel kills the program too (``PR_SET_PDEATHSIG``)."""
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl  # found before the fork: nothing is imported in the child

    def die_with_parent() -> None:  # in the child, before exec
        os.setpgid(0, 0)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])  # a stop must reach it, whatever mask this process inherited

    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=die_with_parent,  # noqa: PLW1509 - called before this process starts any thread
    )


PR_SET_PDEATHSIG = 1
"""Linux's prctl option: the signal a process gets when its parent dies."""


class StopForwarder:
    """Passes the first SIGTERM (or SIGINT) this process gets on to the program, once: the launcher chain above may
    deliver it more than once (a platform signals several processes, each passing it on), and a framework whose
    stop is collective (Lightning) hangs when its ranks count different numbers of signals. With ``platform`` the
    platform itself signals every process of the job (Slurm's step): the program has its own, nothing is passed.
    Listening starts before the program does; a stop heard before it exists reaches it once it does."""

    def __init__(self, *, platform: bool) -> None:
        self.platform = platform
        self.child: subprocess.Popen[bytes] | None = None
        self.heard: int | None = None
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.hear)

    def hear(self, number: int, _frame: object) -> None:
        if self.platform or self.heard is not None:
            return
        self.heard = number
        if self.child is not None:
            self.pass_on()

    def attach(self, child: subprocess.Popen[bytes]) -> None:
        self.child = child
        if self.heard is not None:
            self.pass_on()

    def pass_on(self) -> None:
        assert self.child is not None and self.heard is not None
        try:
            self.child.send_signal(self.heard)
        except ProcessLookupError:
            return
        name = signal.Signals(self.heard).name
        print(f"{SHIPPED_AS}: {name} passed on to the program; later ones are not", file=sys.stderr, flush=True)


def follow(child: subprocess.Popen[bytes], metrics: Metrics, tag: str = "") -> int:
    """The program's exit code, once it has ended. Its output and its errors are copied through as whole lines
    (:class:`cloudddp.injob.output_lines.Lines`), each to where it was written (the platform may read the errors
    apart: SageMaker's toolkit takes a failure's reason from them), each line after ``tag``, and metrics are read
    from both."""
    assert child.stdout is not None and child.stderr is not None
    reading, ended = threading.Lock(), threading.Event()

    whole = shipped(LINES_SHIPPED_AS, "cloudddp.injob.output_lines")
    if whole is None:
        raise SystemExit(f"{SHIPPED_AS}: {LINES_SHIPPED_AS} is not beside this file; it ships with every snapshot")

    def copy(source: Any, sink: Any) -> None:
        lines, fd = whole.Lines(), source.fileno()
        while True:
            quiet = not select.select([fd], [], [], 0.5)[0]
            data = b"" if quiet else os.read(fd, 65536)
            last = not data and (not quiet or ended.is_set())  # its end; or quiet, the program gone (not its orphans)
            out = lines.feed(data, final=last)  # quiet: a held bar state may be due
            with contextlib.suppress(OSError, ValueError):  # nowhere to write: drain on, so the program never blocks
                sink.write("".join(tag + line for line in out))  # whole lines, in one write
                sink.flush()
            with reading:
                for line in out:
                    metrics.read(line)
            if last:
                return

    streams = ((child.stdout, sys.stdout), (child.stderr, sys.stderr))
    copiers = [threading.Thread(target=copy, args=pair, daemon=True) for pair in streams]
    for copier in copiers:
        copier.start()
    code = _wait(child)
    ended.set()
    for copier in copiers:
        copier.join()
    return code


def _wait(child: subprocess.Popen[bytes]) -> int:
    """The child's exit code, waiting through the signals this process handles meanwhile."""
    while True:
        with contextlib.suppress(InterruptedError):
            return child.wait()


def shipped(name: str, module: str) -> Any:
    """The module shipped beside this file as ``name`` (in a code snapshot), or cloudddp's own ``module`` where this
    file runs as part of cloudddp (``python -m cloudddp.injob.shim``: the local backend, or as a script from the
    source); None when neither is there."""
    import importlib
    import importlib.util

    if __package__:
        return importlib.import_module(module)
    where = Path(__file__).resolve().parent / name
    if not where.is_file():  # this file run as a script from cloudddp's source: the module is beside it by its own name
        where = where.with_name(module.rsplit(".", 1)[-1] + ".py")
    spec = importlib.util.spec_from_file_location(where.stem, where)
    if spec is None or spec.loader is None or not where.is_file():
        return None
    found = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = found  # where a dataclass of the module looks its module up
    spec.loader.exec_module(found)
    return found


def keeper(declared: list[str]) -> Any:
    """The keeper of the job's ``checkpoint.files`` (the module shipped beside this file), its links made; None
    when nothing is declared or checkpointing is off."""
    if not declared:
        return None
    module = shipped("_cloudddp_keep.py", "cloudddp.injob.keepfiles")
    if module is None:
        raise SystemExit(f"{SHIPPED_AS}: checkpoint.files needs _cloudddp_keep.py beside this file; it is not there")
    found = module.from_environment(declared)
    if found is not None:
        first = os.environ.get("LOCAL_RANK", "0") == "0"  # only one process of a node starts it afresh
        try:
            notes = found.link(fresh=first and os.environ.get("CLOUDDDP_RESUME") == "never")
        except OSError as e:
            raise SystemExit(f"{SHIPPED_AS}: checkpoint.files: cannot link into the checkpoint folder: {e}") from None
        for note in notes:
            print(note, file=sys.stderr, flush=True)
    return found


def log_watcher(tag: str) -> Any:
    """On global rank 0, the watcher of the frameworks' own log files (Lightning's ``metrics.csv``, TensorBoard
    event files: :mod:`cloudddp.injob.framework_logs`, shipped beside this file), which prints their new rows as
    metric lines on this process's output, what is there already read past; None on other ranks."""
    module = shipped("_cloudddp_logs.py", "cloudddp.injob.framework_logs") if rank() == "0" else None
    if module is None:
        return None

    def write(line: str) -> None:
        sys.stdout.write(f"{tag}{line}\n")
        sys.stdout.flush()

    found = module.watcher(write)
    found.read_past()
    return found


def main() -> None:
    payload = read_payload(sys.argv[1:])
    for name in payload.get("unset", []):  # what the platform set and the job must not get
        os.environ.pop(str(name), None)
    os.environ.update({str(k): str(v) for k, v in payload.get("env", {}).items()})
    if "OMPI_COMM_WORLD_RANK" in os.environ:  # started by mpirun
        os.environ.update(shipped(MPI_AS, "cloudddp.injob.mpi_env").mpi_environment(dict(os.environ)))
    python = sys.executable
    if payload.get("requirements"):
        python = environment_for(payload["requirements"]["file"], payload["requirements"]["digest"])
        os.environ["PATH"] = f"{Path(python).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    if any("{{last_checkpoint:" in str(word) for word in payload["argv"]):  # its newest match, chosen now
        payload["argv"] = shipped(RESUME_AS, "cloudddp.injob.resume_arg").launch(payload["argv"], os.environ)
    argv = command(payload, python)
    kept = keeper([str(p) for p in payload.get("keep", [])])
    hooks = shipped(HOOKS_AS, "cloudddp.injob.stop_hooks")  # a framework's part of a stop, in the program's process
    if hooks is not None:
        hooks.prepare(os.environ, private_folder())
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    tag = RANK_TAG.format(rank=rank()) if payload.get("tag") else ""
    metrics = Metrics(payload.get("metrics", []))
    stops = StopForwarder(platform=payload.get("stops") == "platform")
    if os.environ.get(PREFLIGHT):
        preflight(python, tag, stops)
    logs = log_watcher(tag)
    child = start_program(argv)  # before any thread of this process starts
    stops.attach(child)
    if logs is not None:
        logs.start()
    stacks_on_request()
    if kept is not None and os.environ.get("LOCAL_RANK", "0") == "0":  # one saver per node
        kept.keep_saving()
    code = follow(child, metrics, tag)
    if logs is not None:
        logs.stop()
    if kept is not None:
        kept.save(final=True)
    if code < 0:  # killed by a signal: end the same way, so the launcher sees what happened
        end_as_killed_by(-code)
    sys.exit(code)


def stacks_on_request() -> None:
    """This node's ranks' stacks on request, where its platform has a path (:mod:`cloudddp.injob.stack_requests`)."""
    try:
        module = shipped(REQUESTS_AS, "cloudddp.injob.stack_requests")
        if module is not None:
            module.start(shipped(module.RANK_STACKS_AS, "cloudddp.injob.rank_stacks"))
    except Exception as e:  # noqa: BLE001 - the stacks on request must never stop training
        print(f"{SHIPPED_AS}: no stacks on request: {e}", file=sys.stderr, flush=True)


def preflight(python: str, tag: str, stops: StopForwarder) -> None:
    """The interconnect pre-flight (:mod:`cloudddp.injob.interconnect`, shipped beside this file, run by ``python``):
    this process ends here when the job must not start (its fabric is not in use, or a stop came meanwhile)."""
    module = shipped(INTERCONNECT_AS, "cloudddp.injob.interconnect")
    code = module.check(python, tag) if module is not None else None
    if stops.heard is not None or (code is not None and code < 0):
        end_as_killed_by(stops.heard or -(code or 0))
    if code is not None:
        sys.exit(code)


def end_as_killed_by(number: int) -> None:
    """End this process by signal ``number``, as its program ended. SIGKILL and SIGSTOP have no handler to reset
    (``signal.signal`` refuses them); any other signal this process handles (SIGTERM) gets its default back first."""
    if number not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(number, signal.SIG_DFL)
    os.kill(os.getpid(), number)
    sys.exit(128 + number)  # a signal that does not end a process (SIGSTOP, SIGCHLD): say which one ended the program


if __name__ == "__main__":
    main()
