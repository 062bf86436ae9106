"""Placeholders a spec's arguments and environment use to name the job's shape and places on every backend.

One ``job.yaml`` serves every backend although each runs the job in another shape and at other paths: local 2×2
from ``local.*``, the cloud's from ``resources.*``, checkpoints in a local folder, an S3-synced one or an Azure ML
output. A framework that must be told the shape (Lightning's ``--trainer.num_nodes``) or a folder (Hugging Face's
``--output_dir``) gets it from a placeholder, which each backend expands in what it runs and ``render`` shows
expanded::

    code:
      args: [--trainer.num_nodes, "{{nodes}}", --trainer.devices, "{{processes_per_node}}"]

The syntax is double braces because single braces (``{epoch}``) are Python format fields that frameworks take as
arguments themselves (Lightning's checkpoint ``filename``), ``$X`` and ``${X}`` belong to the shell and
``${x.y}`` to Hydra/OmegaConf (and ``${{...}}`` to Azure ML, whose bindings pass through untouched). A name
this module does not know is an error at load, so a typo never reaches the cloud; a literal ``{{`` followed by a
known name cannot be written (none of those tools needs one).

One placeholder is expanded later: ``{{last_checkpoint:PATTERN}}`` (``code.args`` and ``code.command`` only, with
checkpointing on) names the newest checkpoint in the job's checkpoint folder that matches PATTERN, a glob relative to
it, which only the folder's content when the job starts can say; ``render`` keeps it as it is and each rank's
launcher expands it (:mod:`cloudddp.injob.resume_arg`). Its pattern is checked here: relative, inside the folder.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping

from cloudddp.injob import resume_arg

PATTERN = re.compile(r"(?<!\$)\{\{\s*([^{}\s]+)\s*\}\}")
"""``{{name}}``, but not Azure ML's own ``${{outputs.x}}`` bindings, which a spec may still write for Azure ML."""
INPUT = "inputs."
NAMES = (
    "nodes",  # the job's node count on this backend
    "processes_per_node",
    "world_size",  # nodes × processes_per_node
    "checkpoint_dir",  # CLOUDDDP_CHECKPOINT_DIR (needs checkpointing on)
    "model_dir",  # CLOUDDDP_MODEL_DIR: what the run keeps
    "output_dir",  # the same folder, under the name frameworks give it
    "tensorboard_dir",  # CLOUDDDP_TENSORBOARD_DIR (needs outputs.tensorboard)
    "job_name",
)
"""Every placeholder but ``{{inputs.NAME}}`` (input NAME's path inside the job) and ``{{last_checkpoint:PATTERN}}``;
docs/runtime-contract.md says what each expands to on each backend."""
LAST_CHECKPOINT = resume_arg.NAME + ":"
"""``{{last_checkpoint:PATTERN}}``: the newest kept checkpoint matching PATTERN, expanded when each rank starts."""


def last_checkpoint(name: str) -> str | None:
    """The PATTERN of a ``last_checkpoint:PATTERN`` placeholder name; None for any other name."""
    return name[len(LAST_CHECKPOINT) :] if name.startswith(LAST_CHECKPOINT) else None


def at_start(text: str) -> dict[str, str]:
    """The values of ``text``'s placeholders that are expanded when each rank starts (``last_checkpoint:PATTERN``):
    each the placeholder itself in its one form, which every backend sends as it is."""
    found = ((name, last_checkpoint(name)) for name in names_in(text))
    return {name: resume_arg.placeholder(pattern) for name, pattern in found if pattern is not None}


def names_in(text: str) -> list[str]:
    """The placeholder names ``text`` uses, in order."""
    return PATTERN.findall(text)


def unknown(text: str, inputs: Iterable[str] | None = None) -> str | None:
    """Why a placeholder in ``text`` names nothing (with the closest name), or None when every one is known.
    ``inputs``: the job's input names; None accepts any ``{{inputs.NAME}}`` (a section that cannot see them)."""
    known = [*NAMES, *(INPUT + name for name in inputs or ()), LAST_CHECKPOINT + "PATTERN"]
    for name in names_in(text):
        pattern = last_checkpoint(name)
        if pattern is not None:
            why = resume_arg.problem(pattern)
            if why:
                return f"{{{{{name}}}}} in {text!r}: {why}"
        elif name not in known and not (inputs is None and name.startswith(INPUT)):
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {{{{{close[0]}}}}}? " if close else ""
            shown = [*NAMES, *([INPUT + name for name in inputs or ()] or [INPUT + "NAME"]), known[-1]]
            listed = ", ".join("{{" + k + "}}" for k in shown)
            return f"unknown placeholder {{{{{name}}}}} in {text!r}: {hint}known: {listed}"
    return None


def expand(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each placeholder replaced by its value (a name missing from ``values`` raises KeyError: the
    caller says why that place does not exist in this job)."""
    return PATTERN.sub(lambda m: values[m.group(1)], text)
