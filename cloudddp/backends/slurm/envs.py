"""The job's requirements environment on the cluster's shared filesystem: keyed on everything that shapes it,
built once under a lock, trusted only while its recorded sha256 matches.

The folder is ``<workdir>/envs/<key>``, where the key is a hash of ``slurm.python``, ``slurm.modules``,
``slurm.setup`` and the requirement lines: two jobs whose setup lines activate different base environments
get different folders. The base Python's real path and version are read on the cluster (they are only
known after the modules and setup lines ran) and recorded in the environment with a sha256 of its files
(``.cloudddp-env``); an environment is used only when both still match, else it is built again (or, where
it may not be built, the job stops naming what differs). A build happens in a folder of its own, under
``flock`` on ``<key>.lock``, and is published by renaming a link, so jobs running at once never see half of
one. The same shell functions run on the login node (``slurm.install_on: login``, at submit) and in the job
(``job``: built there; ``login``: checked there).
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Sequence

RECORD = ".cloudddp-env"
"""The file in an environment that records what it was built for and the sha256 of its files."""

_LAYER = (
    'import sysconfig; paths = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib")); '
    'print("import site; " + "; ".join(f"site.addsitedir({p!r})" for p in paths))'
)

FUNCTIONS = f"""\
cloudddp_env_tree() {{  # the sha256 of an environment's files and links (bytecode caches and the record aside)
  ( cd "$1" && {{
    find . \\( -name __pycache__ -o -name {RECORD} \\) -prune -o -type f -print0 | LC_ALL=C sort -z \\
      | xargs -0 -r sha256sum
    find . -name __pycache__ -prune -o -type l -printf '%p -> %l\\n' | LC_ALL=C sort
  }} | sha256sum | cut -d' ' -f1 )
}}
cloudddp_env_ok() {{  # $1 the environment, $2 what it must have been built for
  [ -f "$1/{RECORD}" ] || return 1
  [ "$(sed -n 1p "$1/{RECORD}")" = "$2" ] \\
    || {{ cloudddp_env_why="it was built for another base Python or requirements list"; return 1; }}
  [ "$(sed -n 2p "$1/{RECORD}")" = "sha256=$(cloudddp_env_tree "$1")" ] \\
    || {{ cloudddp_env_why="its files changed since it was built (sha256)"; return 1; }}
}}
cloudddp_env() {{  # $1 the environment, $2 the base Python, $3 the key, $4 build or check, $5 the requirements
  local env=$1 python=$2 base want build site
  base=$("$python" -c 'import os, sys; print(os.path.realpath(sys.executable), sys.version.split()[0])') \\
    || {{ echo "cloudddp: the base Python $python does not run here ($(hostname -s))" >&2; return 1; }}
  want="key=$3 base=$base"
  cloudddp_env_why="it is not built yet"
  if cloudddp_env_ok "$env" "$want"; then echo "cloudddp: environment $env ready (sha256 checked)"; return 0; fi
  if [ "$4" = check ]; then
    echo "cloudddp: the requirements environment $env cannot be used on $(hostname -s): $cloudddp_env_why;" \\
      "it was to be built at submit (slurm.install_on: login) over $base: submit again, or set" \\
      "slurm.install_on: job where the login node's Python differs from the nodes'" >&2
    return 1
  fi
  mkdir -p "$(dirname "$env")" || return 1
  exec 9>>"$env.lock"
  command -v flock >/dev/null && {{ flock 9 || return 1; }}
  if cloudddp_env_ok "$env" "$want"; then
    echo "cloudddp: environment $env ready (built meanwhile)"; exec 9>&-; return 0
  fi
  echo "cloudddp: building the requirements environment $env over $base ($cloudddp_env_why)"
  build="$env.$(hostname -s).$$"
  rm -rf "$build"
  "$python" -m venv --without-pip "$build" \\
    && site=$("$build/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \\
    && "$python" -c {shlex.quote(_LAYER)} > "$site/_cloudddp_layer.pth" \\
    && "$python" -m pip --python "$build/bin/python" install -q --disable-pip-version-check -r "$5" \\
    && printf '%s\\nsha256=%s\\n' "$want" "$(cloudddp_env_tree "$build")" > "$build/{RECORD}" \\
    && ln -sfn "$(basename "$build")" "$env.link" && mv -T "$env.link" "$env" \\
    || {{ echo "cloudddp: could not build $env (pip needs 22.3 or later in $python for --python)" >&2; \\
      rm -rf "$build"; exec 9>&-; return 1; }}
  exec 9>&-
  echo "cloudddp: environment $env built"
}}
"""
"""Shell functions: ``cloudddp_env ENV PYTHON KEY build|check REQUIREMENTS``."""


def key(python: str, modules: Sequence[str], setup: Sequence[str], requirements: str) -> str:
    """The sha256 of what shapes an environment and is known before the job runs."""
    shaped = {"python": python, "modules": list(modules), "setup": list(setup), "requirements": requirements}
    return hashlib.sha256(json.dumps(shaped, sort_keys=True).encode()).hexdigest()


def folder(workdir: str, env_key: str) -> str:
    return f"{workdir}/envs/{env_key[:16]}"


def call(env: str, python: str, env_key: str, mode: str, requirements: str = "requirements.txt") -> str:
    """The shell line that makes sure ``env`` is usable (``build``) or is the one recorded (``check``)."""
    q = shlex.quote
    return f"cloudddp_env {q(env)} {q(python)} {env_key} {mode} {q(requirements)}"


def login_build(
    env: str, python: str, env_key: str, *, code_dir: str, modules: Sequence[str], setup: Sequence[str]
) -> str:
    """The bash text that builds the environment on the login node, in the run's unpacked code folder, after
    the job's modules and setup lines (the base Python is theirs)."""
    q = shlex.quote
    lines = [f"cd {q(code_dir)} || exit 1"]
    if modules:
        # ssh runs a non-login shell, where `module` is often not defined yet: the system profile defines it.
        lines.append("type module >/dev/null 2>&1 || . /etc/profile >/dev/null 2>&1 || true")
        lines += [f"module load {q(m)} || exit 1" for m in modules]
    lines += list(setup)
    lines += [FUNCTIONS, call(env, python, env_key, "build") + " || exit 1"]
    return "\n".join(lines) + "\n"
