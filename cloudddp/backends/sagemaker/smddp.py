"""smddp for a script of one's own: the launcher imports the library's client first; render says what cannot work.

The SageMaker data-parallel library registers its ``smddp`` process-group backend when
``smdistributed.dataparallel.torch.torch_smddp`` is imported. cloudddp's shared script imports it itself; a script
of one's own that only calls ``init_process_group(os.environ["CLOUDDDP_DIST_BACKEND"])`` would fail with
"Unknown backend type smddp". So an smddp job's launcher payload names the module (``preload``) and the rank
launcher imports it in the script's process before the script runs (:mod:`cloudddp.injob.preload`). What the
launcher cannot fix is said at render: a ``code.command`` (its processes are not a Python script the launcher
starts), and a script that never asks for the backend cloudddp names.
"""

from __future__ import annotations

from cloudddp.spec.model import JobSpec, is_shared_script

SMDDP_CLIENT = "smdistributed.dataparallel.torch.torch_smddp"
"""The module whose import registers the ``smddp`` backend with torch.distributed."""
_ASKS_FOR_IT = (b"CLOUDDDP_DIST_BACKEND", b"smddp")


def preload(spec: JobSpec) -> list[str]:
    """The modules the launcher imports in the script's process first: smddp's client for an smddp job's script."""
    return [SMDDP_CLIENT] if spec.distribution.backend == "smddp" and spec.code.command is None else []


def own_script_warnings(spec: JobSpec) -> list[str]:
    """Why an smddp job's own program may not get an smddp process group (none for the shared script)."""
    if spec.distribution.backend != "smddp" or is_shared_script(spec):
        return []
    if spec.code.command is not None:
        return [
            f"distribution.backend smddp with code.command: the launcher cannot import {SMDDP_CLIENT} into the "
            f"command's processes; the script they run must `import {SMDDP_CLIENT}` before "
            'init_process_group("smddp"), or it fails with "Unknown backend type smddp"'
        ]
    try:
        text = (spec.code_dir / str(spec.code.entry)).read_bytes()
    except OSError:
        return []
    if any(word in text for word in _ASKS_FOR_IT):
        return []
    return [
        f"distribution.backend smddp: {spec.code.entry} names neither CLOUDDDP_DIST_BACKEND nor smddp, so its process "
        "group will not be smddp's (a framework's own group is NCCL); call "
        'init_process_group(os.environ["CLOUDDDP_DIST_BACKEND"]) (the launcher imports smddp\'s client first)'
    ]
