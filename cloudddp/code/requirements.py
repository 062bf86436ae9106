"""A job's Python dependencies: ``code.requirements`` in the spec, or a ``requirements.txt`` in ``code.dir``.

Every backend installs them before the script starts: SageMaker's container installs the snapshot's
``requirements.txt`` itself; on Azure ML the shipped launcher (:mod:`cloudddp.injob.shim`) installs them on each
node into an environment layered over the image's Python; Slurm jobs install them once per list on the
shared filesystem; the local
backend runs the job in this Python when it already satisfies them, else in an environment made for them
(``$CLOUDDDP_HOME/envs/<hash>``, layered over this one so torch is not installed twice) and reused while
the list is unchanged. Lines are checked at render, so a malformed one is an error naming it, before
anything is sent.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

from cloudddp.errors import UserError
from cloudddp.injob.shim import layer_over_this_python
from cloudddp.spec.model import JobSpec

FILE = "requirements.txt"


class Requirements(NamedTuple):
    """The pip requirements a job installs before its script starts. A named tuple, as the code package's other
    records are: cheaper to define than a frozen dataclass (~1 ms of every render)."""

    lines: tuple[str, ...]
    """The requirement lines, as pip reads them (options and local paths included)."""
    source: str
    """Where they come from, for messages: ``code.requirements`` or the file's path."""
    shipped: bool
    """True when cloudddp adds them to the snapshot as requirements.txt (they come from the spec)."""

    @property
    def text(self) -> str:
        return file_text(self.lines)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]


def file_text(lines: tuple[str, ...] | list[str]) -> str:
    """The requirements.txt holding ``lines``."""
    return "".join(f"{line}\n" for line in lines)


def of(spec: JobSpec) -> Requirements | None:
    """The job's requirements, checked; None when it has none."""
    in_folder = spec.code_dir / FILE
    if spec.code.requirements:
        if in_folder.is_file():
            raise UserError(
                f"code.requirements and {in_folder} both list dependencies",
                hint=f"keep one: move the lines into {FILE}, or delete the file",
            )
        found = Requirements(tuple(spec.code.requirements), "code.requirements", shipped=True)
    elif in_folder.is_file():
        _refuse_outside(in_folder, spec.code_dir)
        lines = [line.strip() for line in in_folder.read_text(encoding="utf-8", errors="replace").splitlines()]
        found = Requirements(
            tuple(line for line in lines if line and not line.startswith("#")), str(in_folder), shipped=False
        )
    else:
        return None
    for line in found.lines:
        check_line(line, found.source)
    return found if found.lines else None


def _refuse_outside(path: Path, folder: Path) -> None:
    """A requirements file that is a link out of the code folder is refused before it is read: a line of it (of
    ``/etc/shadow``, say) would otherwise reach an error message."""
    target = path.resolve()
    if not target.is_relative_to(folder.resolve()):
        raise UserError(
            f"{path} is a link to {target}, outside code.dir: it is not read",
            hint=f"copy the file into {folder} instead of linking to it",
        )


def check_line(line: str, source: str) -> None:
    """A requirement specifier must parse; pip options, URLs and paths are left to pip."""
    from packaging.requirements import InvalidRequirement, Requirement

    if line.startswith(("-", ".", "/")) or "://" in line or line.startswith("git+"):
        return
    try:
        Requirement(line.split(" #", 1)[0].strip())
    except InvalidRequirement as e:
        raise UserError(
            f"{source}: {line!r} is not a requirement pip can read: {e}",
            hint="write it as a pip requirement, e.g. 'einops>=0.7'",
        ) from None


def unsatisfied(reqs: Requirements) -> list[str]:
    """The lines this Python does not satisfy (options, URLs and paths count as unsatisfied: pip decides)."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import InvalidRequirement, Requirement

    missing = []
    for line in reqs.lines:
        try:
            req = Requirement(line.split(" #", 1)[0].strip())
        except InvalidRequirement:
            missing.append(line)
            continue
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            installed = version(req.name)
        except PackageNotFoundError:
            missing.append(line)
            continue
        if req.specifier and not req.specifier.contains(installed, prereleases=True):
            missing.append(line)
    return missing


def python_for(reqs: Requirements | None, base: Path, home: Path) -> tuple[str, str]:
    """``(python, what was done)``: this Python when it satisfies ``reqs``, else the one of an environment
    made for them under ``home/envs/<digest>``, layered over this one (its packages come first, then this
    Python's, so torch and the rest are not installed twice).
    ``base`` is the folder requirement paths are relative to (the job's code). A requirement that cannot be
    installed is a UserError with pip's reason."""
    if reqs is None or not unsatisfied(reqs):
        return sys.executable, "requirements satisfied by this Python" if reqs else "no requirements"
    env = home / "envs" / reqs.digest
    python = env / "bin" / "python"
    done = env / ".installed"
    if done.is_file():
        return str(python), f"requirements installed earlier in {env}"
    import venv  # with the logging package it brings, ~2 ms that only building an environment needs

    venv.EnvBuilder(with_pip=False, clear=True).create(env)
    layer_over_this_python(python)
    listing = env / FILE
    listing.write_text(reqs.text)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--disable-pip-version-check",
            "-r",
            str(listing),
        ],
        cwd=base,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        reason = [line for line in (result.stderr or result.stdout).splitlines() if line.strip()][-3:]
        raise UserError(
            f"{reqs.source}: could not install the job's requirements: " + " / ".join(reason),
            hint="fix the requirement pip names, or install it into this Python yourself",
        )
    done.write_text("")
    return str(python), f"requirements installed in {env} (reused while the list is unchanged)"


__all__ = ["FILE", "Requirements", "check_line", "file_text", "of", "python_for", "unsatisfied"]
