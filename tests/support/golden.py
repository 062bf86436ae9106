"""Golden plans: every backend's rendered plan for a set of jobs, kept under ``tests/golden/`` and compared byte for
byte, so that one diff shows a change's effect on every backend's request and plan text at once.

    python -m tests.support.golden            # compare; list the plans that differ (exit 1)
    python -m tests.support.golden --update   # write them anew (make golden)

Each file is one job on one backend: the plan's lines (decisions, warnings), its estimate, target, uploads and the
other fields ``render --json`` prints, then each document (the request as the backend's own tools read it); or,
for a job the backend refuses, the error and its hint. What differs between machines or runs is replaced by a
placeholder: this checkout's folder (``<repo>``), cloudddp's home for the render (``<home>``), the interpreter
(``<python>``), the code snapshot's content address (``<snapshot>``) and what hashes it (``<digest>``, an Azure ML
job name's). The render is offline, with a fixed user configuration (the clouds' settings and Slurm's working
folder), no credentials, two CPU cores, no GPU, a fixed run token, and fixed stand-ins for the programs cloudddp
ships inside every snapshot (so that editing one moves no plan).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from tests.support.cli import ROOT

GOLDEN = ROOT / "tests" / "golden"
BACKENDS = ("local", "sagemaker", "azureml", "slurm")
TOKEN = "golden"
CORES = 2
HOME = Path(tempfile.gettempdir()) / "cloudddp-golden-home"
"""cloudddp's home for every golden render: one fixed path, as plans name files under it (an Azure ML job's name
hashes its document, which names the code snapshot's path)."""
LOCK = Path(tempfile.gettempdir()) / "cloudddp-golden-home.lock"

CONFIG = """\
sagemaker:
  region: eu-west-1
  role: arn:aws:iam::111122223333:role/GoldenTrainingRole
  bucket: golden-artifacts
azureml:
  subscription_id: 00000000-0000-0000-0000-000000000000
  resource_group: golden-rg
  workspace: golden-ws
slurm:
  workdir: /shared/golden
"""
"""The user configuration every golden render reads: what a render needs of each backend besides the job."""


@dataclass(frozen=True)
class Case:
    name: str
    job: str
    """Relative to the checkout."""
    overrides: tuple[str, ...] = ()


CPU_SIZES = ("sagemaker.instance_type=ml.c5.2xlarge", "azureml.vm_size=Standard_D8s_v5")
"""What a CPU job names on the clouds (cloudddp ranks GPU sizes only)."""

CASES = (
    Case("digits", "jobs/digits-local.yaml"),
    Case("cifar10", "jobs/cifar10-resnet18.yaml"),
    Case("cifar10-azureml", "jobs/cifar10-azureml.yaml"),
    Case("cifar10-smddp", "jobs/cifar10-smddp.yaml"),
    Case("cifar10-slurm", "jobs/cifar10-slurm.yaml"),
    Case("cifar10-slurm-no-workdir", "jobs/cifar10-slurm.yaml", ("slurm.workdir=null",)),
    Case("lightning", "examples/lightning/job.yaml"),
    Case("huggingface", "examples/huggingface/job.yaml"),
    Case("accelerate", "examples/accelerate/job.yaml"),
    Case("ownscript", "tests/fixtures/ownscript/job.yaml"),
    Case("shaped", "tests/fixtures/shaped/job.yaml"),
    Case("tiny", "tests/fixtures/tinyjob/job.yaml"),
    Case(
        "tiny-cpu-sizes",
        "tests/fixtures/tinyjob/job.yaml",
        (*CPU_SIZES, "resources.nodes=2"),
    ),
    Case("cifar10-2h-restarts", "jobs/cifar10-resnet18.yaml", ("limits.max_runtime=2h", "limits.max_restarts=2")),
    Case("cifar10-1gpu", "jobs/cifar10-resnet18.yaml", ("resources.nodes=1", "resources.gpus_per_node=1")),
    Case("cifar10-spot", "jobs/cifar10-resnet18.yaml", ("resources.spot=true", "limits.max_recoveries=2")),
    Case("cifar10-mpi", "jobs/cifar10-resnet18.yaml", ("distribution.launcher=mpi",)),
    Case("cifar10-budget", "jobs/cifar10-resnet18.yaml", ("resources.max_cost=5",)),
    Case(
        "tiny-step-time",
        "tests/fixtures/tinyjob/job.yaml",
        ("resources.step_time=0.25", "resources.steps=400", "resources.max_cost=1", *CPU_SIZES),
    ),
    Case(
        "tiny-no-checkpoints-secrets",
        "tests/fixtures/tinyjob/job.yaml",
        ("checkpoint.enabled=false", "env.TOKEN.from_env=GOLDEN_TOKEN", "env.MODE=fast", *CPU_SIZES),
    ),
    Case(
        "tiny-files-30m",
        "tests/fixtures/tinyjob/job.yaml",
        ("checkpoint.files=[state.pt]", "limits.max_runtime=30m", *CPU_SIZES),
    ),
)


def file_of(case: Case, backend: str) -> Path:
    return GOLDEN / case.name / f"{backend}.txt"


@contextlib.contextmanager
def fixed_machine() -> Iterator[Path]:
    """Render as on a fresh two-core machine without a GPU or credentials, in a home of its own: yields it."""
    from cloudddp import runtime

    with _held(LOCK):
        shutil.rmtree(HOME, ignore_errors=True)
        HOME.mkdir(mode=0o700)
        home = HOME
        (home / "config.yaml").write_text(CONFIG)
        os.chmod(home, 0o700)
        os.chmod(home / "config.yaml", 0o600)
        kept = {k: v for k, v in os.environ.items() if k.startswith(("CLOUDDDP_", "AWS_", "AZURE_", "XDG_"))}
        cwd, home_before = Path.cwd(), os.environ.get("HOME", str(Path.home()))
        try:
            for key in kept:
                del os.environ[key]
            os.environ.update({"CLOUDDDP_HOME": str(home), "HOME": str(home)})
            os.chdir(home)
            with (
                mock.patch("os.cpu_count", return_value=CORES),
                mock.patch("cloudddp.backends.local.decide._has_cuda_device", return_value=False),
                mock.patch("cloudddp.runtime.shipped_files", _stand_ins(runtime.shipped_files)),
            ):
                yield home
        finally:
            os.chdir(cwd)
            os.environ.update(kept)
            os.environ["HOME"] = home_before
            shutil.rmtree(HOME, ignore_errors=True)


def _stand_ins(shipped: Callable[..., dict[str, bytes]]) -> Callable[..., dict[str, bytes]]:
    """The programs cloudddp ships inside every snapshot, each under its own name with fixed bytes: an edit of one
    moves no golden plan (the snapshot's size, and the job names that hash it, would)."""

    def fixed(*, keep: bool = False) -> dict[str, bytes]:
        return {name: f"# {name}: shipped by cloudddp\n".encode() for name in shipped(keep=keep)}

    return fixed


@contextlib.contextmanager
def _held(path: Path) -> Iterator[None]:
    """One golden render at a time on this machine (they share :data:`HOME`)."""
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def rendered(case: Case, backend: str, home: Path) -> str:
    """The golden text of ``case`` on ``backend``, rendered in ``home`` (:func:`fixed_machine`)."""
    from cloudddp.backends.plugins import backend_class, load_spec
    from cloudddp.errors import UserError

    try:
        spec = load_spec(ROOT / case.job, list(case.overrides))
        impl = backend_class(backend)
        options: dict[str, Any] = {"token": TOKEN} if "token" in _init_parameters(impl) else {}
        plan = impl(**options).render(spec)
    except UserError as e:
        text = f"refused: {e}\n"
    else:
        data = plan.to_dict()
        documents = data.pop("documents")
        text = json.dumps(data, indent=2) + "\n"
        for name, body in documents.items():
            text += f"\n# --- {name}\n{body.rstrip()}\n"
    header = f"# {case.job}" + "".join(f" -o {o}" for o in case.overrides) + f" -b {backend}\n"
    return _placeholders(header + text, home)


def _init_parameters(cls: type) -> Sequence[str]:
    import inspect

    return list(inspect.signature(cls.__init__).parameters)


def _placeholders(text: str, home: Path) -> str:
    for sha in dict.fromkeys(re.findall(r"\b[0-9a-f]{64}\b", text)):  # the code snapshot's content address
        text = text.replace(sha, "<snapshot>").replace(sha[:12], "<snapshot:12>")
    # An Azure ML job's name hashes its document, which names the snapshot.
    text = re.sub(rf"-[0-9a-f]{{8}}-{TOKEN}\b", f"-<digest>-{TOKEN}", text)
    for value, name in (
        (sys.executable, "<python>"),
        (str(home.resolve()), "<home>"),
        (str(home), "<home>"),
        (str(ROOT), "<repo>"),
    ):
        text = text.replace(value, name)
    return text


def render_all() -> dict[Path, str]:
    """Every case on every backend: file -> its golden text."""
    with fixed_machine() as home:
        return {file_of(case, backend): rendered(case, backend, home) for case in CASES for backend in BACKENDS}


def main(argv: Sequence[str]) -> int:
    update = "--update" in argv
    found = render_all()
    differ = [path for path, text in found.items() if not path.exists() or path.read_text() != text]
    if update:
        for path in differ:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(found[path])
        kept = set(found)
        stale = [p for p in GOLDEN.glob("*/*.txt") if p not in kept]
        for path in stale:
            path.unlink()
        print(f"golden plans: {len(differ)} written, {len(stale)} removed, {len(found)} in all under {GOLDEN}")
        return 0
    for path in differ:
        print(f"differs: {path.relative_to(ROOT)}")
    print(f"golden plans: {len(found) - len(differ)} of {len(found)} identical")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
