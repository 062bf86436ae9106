"""Runs a job's Python script after importing modules that must be imported in its process first.

Shipped in every code snapshot as ``_cloudddp_preload.py``; the rank launcher (:mod:`cloudddp.injob.shim`) puts it
before the script when its payload names modules (``preload``)::

    python _cloudddp_preload.py smdistributed.dataparallel.torch.torch_smddp -- train.py --lr 0.1

The SageMaker data-parallel library registers its ``smddp`` process-group backend with torch when its client module
is imported; a script of one's own that calls ``init_process_group(os.environ["CLOUDDDP_DIST_BACKEND"])`` without
that import fails with "Unknown backend type smddp". Imported here, in the script's own process, the backend is
registered before the script runs. The script then runs as ``python train.py`` would run it: as ``__main__``, with
its own ``sys.argv`` and its folder first on ``sys.path``.

It needs nothing but Python's standard library: it runs in stock images where cloudddp is not installed.
"""

from __future__ import annotations

import importlib
import os
import runpy
import sys

SHIPPED_AS = "_cloudddp_preload.py"


def main(args: list[str]) -> None:
    if "--" not in args or args.index("--") + 1 >= len(args):
        raise SystemExit(f"{SHIPPED_AS}: expected <module>... -- <script> [args...], got {args!r}")
    cut = args.index("--")
    modules, program = args[:cut], args[cut + 1 :]
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise SystemExit(
                f"{SHIPPED_AS}: cannot import {module} ({e}); distribution.backend smddp needs an image with the "
                "SageMaker data-parallel library (an official PyTorch training image that has it)"
            ) from None
    sys.argv = program
    sys.path[0] = os.path.dirname(os.path.abspath(program[0]))
    runpy.run_path(program[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
