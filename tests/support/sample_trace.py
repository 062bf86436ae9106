"""What each rank trained at each step, read from outside an unchanged script: a ``sitecustomize`` a test puts on
the job's ``PYTHONPATH`` (cloudddp's own ``sitecustomize`` runs it after its hooks), which records the samples of
every training forward pass and prints them on the rank's errors, one line a step::

    SAMPLES {"rank": 0, "t": 1796554807.61, "rows": ["3fa1c2d09e4b", ...]}

A sample is named by a digest of its row in the first tensor the model is given (Lightning's batch ``x``, the
Trainer's ``input_ids``): the rows of the first module call that has a tensor argument, within each outermost
forward pass made while gradients are on (validation and sanity checks run without). The rank is the process
group's (a framework may number ranks its own way: Lightning under Slurm), and the time orders a rank's lines when
logs are read by node (a requeued job's ranks may change nodes). A stopped run's lines and its resume's, in order,
are then compared with an uninterrupted run's: each rank's sequence of steps must be the same.

With ``SAMPLE_TRACE_SIGTERM_AT=N`` in its environment, each rank sends itself SIGTERM once it has traced its Nth
step, so that a test can place a stop on an exact step (the last of an epoch, say) where a cancel from outside lands
wherever the run happens to be.

:func:`install_into` copies this file as ``sitecustomize.py`` into a job's code folder; the job's ``env`` sets
``PYTHONPATH`` to that folder (relative: the program runs in the code folder), then the test's, and
``SAMPLE_TRACE=1``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

FOLDER = "_sample_trace"
"""The folder, in a job's code folder, that holds the tracer as ``sitecustomize.py``."""
LINE = re.compile(r"SAMPLES (\{.*\})")


def install_into(code: Path) -> dict[str, str]:
    """Copy the tracer into ``code``; the environment the job needs for it. The job's ``PYTHONPATH`` replaces the
    test's, so the test's follows the tracer's folder: the ranks import cloudddp from the checkout the test runs
    from (``make mutants``' copy), not from wherever the editable install points."""
    (code / FOLDER).mkdir(exist_ok=True)
    shutil.copyfile(__file__, code / FOLDER / "sitecustomize.py")
    path = os.pathsep.join(filter(None, [FOLDER, os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path, "SAMPLE_TRACE": "1"}


def steps(log: str) -> dict[int, list[tuple[str, ...]]]:
    """Each rank's trained steps in ``log``, in order: the samples of each."""
    found: dict[int, list[tuple[float, tuple[str, ...]]]] = {}
    for match in LINE.finditer(log):
        record = json.loads(match.group(1))
        found.setdefault(int(record["rank"]), []).append((record["t"], tuple(record["rows"])))
    return {rank: [rows for _, rows in sorted(lines, key=lambda line: line[0])] for rank, lines in found.items()}


def _first_tensor(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
    for item in items:
        found = _first_tensor(item)
        if found is not None:
            return found
    return None


def _install() -> None:
    import hashlib
    import time

    import torch
    import torch.distributed as dist
    from torch.nn.modules import module

    depth, rows, traced = [0], [None], [0]
    sigterm_at = int(os.environ.get("SAMPLE_TRACE_SIGTERM_AT", "0"))

    def before(_module: Any, args: Any) -> None:
        if depth[0] == 0:
            rows[0] = None
        depth[0] += 1
        if rows[0] is None and torch.is_grad_enabled():
            tensor = _first_tensor(args)
            if tensor is not None and tensor.dim() >= 1:
                data = tensor.detach().cpu().contiguous()
                rows[0] = [hashlib.blake2b(r.numpy().tobytes(), digest_size=6).hexdigest() for r in data]

    def after(_module: Any, _args: Any, _out: Any) -> None:
        depth[0] -= 1
        if depth[0] == 0 and rows[0] is not None:
            rank = dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))
            record = {"rank": rank, "t": time.time(), "rows": rows[0]}
            print("SAMPLES " + json.dumps(record), file=sys.stderr, flush=True)
            rows[0] = None
            traced[0] += 1
            if traced[0] == sigterm_at:
                os.kill(os.getpid(), signal.SIGTERM)

    module.register_module_forward_pre_hook(before)
    module.register_module_forward_hook(after)


if __name__ == "sitecustomize" and os.environ.get("SAMPLE_TRACE") == "1":
    _install()
