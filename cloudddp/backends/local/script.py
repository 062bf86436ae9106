"""The local plan as a shell script: ``torchrun.sh``, what a person could run by hand to do what launch does."""

from __future__ import annotations

import shlex
from pathlib import Path

from cloudddp.backends.local.rendezvous import ID_VARIABLE
from cloudddp.backends.local.request import LocalRequest


def shell_script(request: LocalRequest, archive: Path) -> str:
    """The plan as a shell script a person could run by hand (secrets stay placeholders)."""
    code = shlex.quote(request.cwd)
    lines = ["#!/usr/bin/env bash", f"mkdir -p {code} && tar xzf {shlex.quote(str(archive))} -C {code}", f"cd {code}"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in request.env.items()]
    if request.keep_files:  # the supervisor does this before torchrun starts
        lines.append(f"python -m cloudddp.injob.keepfiles link {shlex.join(request.keep_files)}")
    lines += [
        f"export {ID_VARIABLE}=$(python -c 'import secrets; print(secrets.token_hex(16))')",
        "# The rendezvous store binds 127.0.0.1 on a port the kernel picks, and says which (nobody can take it first).",
        "exec 3< <(python -m cloudddp.backends.local.store_server --port 0); store=$!",
        "trap 'kill \"$store\"' EXIT  # the store ends with this script",
        "read -r _ _ _ rdzv <&3; rdzv_port=${rdzv##*:}",
    ]
    for node in request.nodes:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in node.env.items())
        amp = " &" if len(request.nodes) > 1 else ""
        argv = shlex.join(node.argv).replace(request.rendezvous_port, "'\"$rdzv_port\"'")  # inside single quotes
        lines.append(f"{env} {argv}{amp}")
    if len(request.nodes) > 1:
        lines.append("wait")
    return "\n".join(lines) + "\n"
