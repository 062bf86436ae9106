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
        lines.append(f"python -m cloudddp.code.keepfiles link {shlex.join(request.keep_files)}")
    lines += [
        f"export {ID_VARIABLE}=$(python -c 'import secrets; print(secrets.token_hex(16))')",
        f"python -m cloudddp.backends.local.store --port {shlex.quote(request.rendezvous_port)} &"
        "  # the rendezvous store, on 127.0.0.1 only",
    ]
    for node in request.nodes:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in node.env.items())
        amp = " &" if len(request.nodes) > 1 else ""
        lines.append(f"{env} {shlex.join(node.argv)}{amp}")
    if len(request.nodes) > 1:
        lines.append("wait")
    return "\n".join(lines) + "\n"
