"""cloudddp's launcher inside a job: runs the job's program with exactly the argv and environment of the spec.

This file is shipped inside the code snapshot as ``_cloudddp_launch.py`` for backends whose own launcher
cannot carry a script's arguments unchanged. SageMaker's training toolkit, for one, turns hyperparameters
into ``--key value`` pairs after decoding each value as JSON, in sorted order, so positional arguments,
flags, repeated options and values such as ``0.10`` or ``"a b"`` do not survive; and its ``mpirun`` (smddp)
forwards only a fixed list of environment variables to ranks on other hosts. The platform's launcher
starts this file once per process instead of the job's program::

    python _cloudddp_launch.py --cloudddp-00 <part> [--cloudddp-01 <part> ...]

The parts, joined in order, are one JSON document ``{"argv": [...], "env": {...}, "python": true}``. This
file sets ``env`` over what the platform set (the spec wins, NCCL settings included) and replaces itself
with ``argv`` (``python`` first when the program is a script), keeping its process id, so the platform's
launcher supervises the real program. It needs nothing but Python's standard library, because it runs in
stock images where cloudddp is not installed.
"""

from __future__ import annotations

import json
import os
import sys

FLAG = "--cloudddp-"
SHIPPED_AS = "_cloudddp_launch.py"


def read_payload(args: list[str]) -> dict[str, object]:
    """The JSON document carried by ``--cloudddp-NN <part>`` arguments; any other argument is ignored
    (a platform may add its own)."""
    parts: dict[int, str] = {}
    i = 0
    while i < len(args):
        key = args[i]
        if key.startswith(FLAG) and key[len(FLAG):].isdigit() and i + 1 < len(args):
            parts[int(key[len(FLAG):])] = args[i + 1]
            i += 2
        else:
            i += 1
    if not parts or sorted(parts) != list(range(len(parts))):
        raise SystemExit(f"{SHIPPED_AS}: expected --cloudddp-00 ... arguments, got {args!r}")
    payload = json.loads("".join(parts[n] for n in sorted(parts)))
    if not isinstance(payload, dict):
        raise SystemExit(f"{SHIPPED_AS}: the payload is not a JSON object")
    return payload


def command(payload: dict[str, object]) -> list[str]:
    """The argv to become: the job's program, started the way this file was (``-m mpi4py`` kept)."""
    argv = [str(a) for a in payload["argv"]]  # type: ignore[attr-defined]
    if not payload.get("python"):
        return argv
    if "mpi4py" in sys.modules and "mpi4py.run" in sys.modules:  # started as `python -m mpi4py` (smddp)
        return [sys.executable, "-m", "mpi4py", *argv]
    return [sys.executable, *argv]


def main() -> None:
    payload = read_payload(sys.argv[1:])
    os.environ.update({str(k): str(v) for k, v in payload.get("env", {}).items()})  # type: ignore[attr-defined]
    argv = command(payload)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main()
