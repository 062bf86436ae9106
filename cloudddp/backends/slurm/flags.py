"""``slurm.sbatch_options`` read as sbatch reads its command line: long and short options, values attached or
in the next item, unambiguous prefixes of long names (sbatch uses getopt_long). Each option comes back in
one canonical form, ``--name`` or ``--name=value``, which the script's ``#SBATCH`` lines carry.

The table is sbatch's options from Slurm 22.05 to 24.11 (``sbatch --help`` and the man page). Options the
rendered script sets itself are refused by name, with the spec field that says it instead, and so are those
cloudddp cannot follow (:data:`UNSUPPORTED`). A long option the table lacks (a SPANK plugin's, such as pyxis's
``--container-image``, or a newer Slurm's) is taken as written when it is one item, ``--name`` or
``--name=value``, unless it is a near miss of a known one (a typo); submit then checks it against the cluster's
own ``sbatch --help`` (:func:`site_options`, :func:`offered`).
"""

from __future__ import annotations

import difflib
import re
from typing import Literal

Takes = Literal["none", "value", "optional"]

_NONE: Takes = "none"
_VALUE: Takes = "value"
_OPTIONAL: Takes = "optional"

LONG: dict[str, Takes] = {
    **dict.fromkeys(
        (
            "account",
            "acctg-freq",
            "array",
            "batch",
            "bb",
            "bbf",
            "begin",
            "chdir",
            "cluster-constraint",
            "clusters",
            "comment",
            "constraint",
            "container",
            "container-id",
            "core-spec",
            "cores-per-socket",
            "cpu-freq",
            "cpus-per-gpu",
            "cpus-per-task",
            "deadline",
            "delay-boot",
            "dependency",
            "distribution",
            "error",
            "exclude",
            "export-file",
            "extra",
            "extra-node-info",
            "gid",
            "gpu-bind",
            "gpu-freq",
            "gpus",
            "gpus-per-node",
            "gpus-per-socket",
            "gpus-per-task",
            "gres",
            "gres-flags",
            "hint",
            "input",
            "job-name",
            "licenses",
            "mail-type",
            "mail-user",
            "mcs-label",
            "mem",
            "mem-bind",
            "mem-per-cpu",
            "mem-per-gpu",
            "mincpus",
            "network",
            "nodefile",
            "nodelist",
            "nodes",
            "ntasks",
            "ntasks-per-core",
            "ntasks-per-gpu",
            "ntasks-per-node",
            "ntasks-per-socket",
            "open-mode",
            "output",
            "partition",
            "power",
            "prefer",
            "priority",
            "profile",
            "qos",
            "reservation",
            "signal",
            "sockets-per-node",
            "switches",
            "thread-spec",
            "threads-per-core",
            "time",
            "time-min",
            "tmp",
            "tres-bind",
            "tres-per-task",
            "uid",
            "wckey",
            "wait-all-nodes",
            "wrap",
            "segment",
        ),
        _VALUE,
    ),
    **dict.fromkeys(
        (
            "exclusive",
            "export",
            "get-user-env",
            "nice",
            "propagate",
            "kill-on-invalid-dep",
            "oom-kill-step",
            "resv-ports",
        ),
        _OPTIONAL,
    ),
    **dict.fromkeys(
        (
            "contiguous",
            "help",
            "hold",
            "ignore-pbs",
            "no-kill",
            "no-requeue",
            "overcommit",
            "oversubscribe",
            "parsable",
            "quiet",
            "reboot",
            "requeue",
            "spread-job",
            "stepmgr",
            "test-only",
            "usage",
            "use-min-nodes",
            "verbose",
            "version",
            "wait",
        ),
        _NONE,
    ),
}
"""sbatch's long options and whether each takes a value."""

SHORT: dict[str, str] = {
    "a": "array",
    "A": "account",
    "b": "begin",
    "B": "extra-node-info",
    "c": "cpus-per-task",
    "C": "constraint",
    "d": "dependency",
    "D": "chdir",
    "e": "error",
    "F": "nodefile",
    "G": "gpus",
    "h": "help",
    "H": "hold",
    "i": "input",
    "J": "job-name",
    "k": "no-kill",
    "L": "licenses",
    "m": "distribution",
    "M": "clusters",
    "n": "ntasks",
    "N": "nodes",
    "o": "output",
    "O": "overcommit",
    "p": "partition",
    "q": "qos",
    "Q": "quiet",
    "s": "oversubscribe",
    "S": "core-spec",
    "t": "time",
    "u": "usage",
    "v": "verbose",
    "V": "version",
    "w": "nodelist",
    "W": "wait",
    "x": "exclude",
}
"""sbatch's one-letter options and their long names."""

OWNED: dict[str, str] = {
    "job-name": "the job is named after the run id, which is how a retried submit finds it",
    "output": "the batch log is the run folder's batch.log, which cloudddp reads",
    "error": "the batch log is the run folder's batch.log, which cloudddp reads",
    "open-mode": "logs are appended across requeues",
    "chdir": "the job starts in its unpacked code snapshot",
    "nodes": "set resources.nodes",
    "ntasks": "set resources.nodes and resources.processes_per_node",
    "ntasks-per-node": "set resources.processes_per_node (and slurm.launch)",
    "cpus-per-task": "set slurm.cpus_per_process",
    "gpus-per-node": "set resources.gpus_per_node (and slurm.gpu_type)",
    "partition": "set slurm.partition",
    "account": "set slurm.account",
    "qos": "set slurm.qos",
    "constraint": "set slurm.constraint",
    "exclusive": "set slurm.exclusive",
    "mem": "set slurm.mem",
    "signal": "set slurm.stop_before_limit",
    "requeue": "set slurm.requeue",
    "no-requeue": "set slurm.requeue",
    "time": "set limits.max_runtime",
    "export": "the job's environment is the spec's env",
    "export-file": "the job's environment is the spec's env",
    "parsable": "cloudddp reads sbatch's answer itself",
    "wrap": "the script is cloudddp's",
    "wait": "cloudddp follows the job itself",
    "help": "sbatch would print its help and submit nothing",
    "usage": "sbatch would print its usage and submit nothing",
    "version": "sbatch would print its version and submit nothing",
    "test-only": "sbatch would submit nothing",
}
"""Options the rendered script decides, and what to change instead."""

UNSUPPORTED: dict[str, str] = {
    "array": "a job array would run every index in one run folder, with one batch.log and one checkpoint folder; "
    "submit one run per index instead (a loop over `cloudddp submit -o code.args=...`)",
}
"""Options sbatch has that a cloudddp run cannot follow, and why."""

_WORD = re.compile(r"[^\s'\"\\#]+\Z")  # one #SBATCH word: sbatch splits the line on spaces and quotes
_NAME = re.compile(r"[a-z][a-z0-9-]*\Z")
NEAR_MISS = 0.85
"""How alike an unknown name must be to a known one to be taken for its typo (``reservaton``: 0.95; pyxis's
``container-image`` against ``container-id``: 0.81, a plugin's own)."""


def normalize(items: list[str]) -> list[str]:
    """``items`` as sbatch would read them, each option as ``--name`` or ``--name=value``; ValueError names
    the item and what to write instead."""
    out: list[str] = []
    rest = list(items)
    while rest:
        item = rest.pop(0)
        if "\n" in item or "\r" in item:
            raise ValueError(f"{item!r}: one option per item, without line breaks")
        if item.startswith("--"):
            given, sep, value = item[2:].partition("=")
            has_value = bool(sep)
            name = _long_name(given, item)
            takes = LONG.get(name, _OPTIONAL if has_value else _NONE)  # another's option: as written
            if name not in LONG and not has_value and rest and not rest[0].startswith("-"):
                raise ValueError(
                    f"{item!r} {rest[0]!r}: write --{name}={rest[0]} as one item (--{name} is not one of sbatch's "
                    "own options, so cloudddp cannot tell whether it takes a value)"
                )
            if takes == _NONE and has_value:
                raise ValueError(f"{item!r}: --{name} takes no value")
            if takes == _VALUE and not has_value:
                if not rest:
                    raise ValueError(f"{item!r}: --{name} needs a value, e.g. --{name}=VALUE")
                value, has_value = rest.pop(0), True
        elif item.startswith("-") and len(item) > 1:
            letter = item[1]
            if letter not in SHORT:
                raise ValueError(f"{item!r}: sbatch has no option -{letter}")
            name = SHORT[letter]
            attached = item[2:].strip()
            if LONG[name] == _NONE:
                if attached:
                    raise ValueError(f"{item!r}: -{letter} (--{name}) takes no value; give one option per item")
                has_value, value = False, ""
            elif attached:
                has_value, value = True, attached.removeprefix("=")
            elif rest:
                has_value, value = True, rest.pop(0)
            else:
                raise ValueError(f"{item!r}: -{letter} (--{name}) needs a value, e.g. --{name}=VALUE")
        else:
            raise ValueError(f"{item!r}: write each as on sbatch's command line, e.g. --reservation=ml")
        if name in OWNED:
            raise ValueError(f"--{name} is set by cloudddp ({OWNED[name]}); leave it out of slurm.sbatch_options")
        if name in UNSUPPORTED:
            raise ValueError(f"--{name} is not supported: {UNSUPPORTED[name]}")
        if has_value and not _WORD.match(value):
            raise ValueError(
                f"{item!r}: the value {value!r} must be one word without spaces, quotes, backslashes or #, "
                "as a #SBATCH line carries it"
            )
        out.append(f"--{name}={value}" if has_value else f"--{name}")
    return out


def _long_name(given: str, item: str) -> str:
    """The long option ``given`` names: itself, or the one option it is an unambiguous prefix of."""
    if given in LONG:
        return given
    matches = [name for name in LONG if name.startswith(given)] if given else []
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise ValueError(f"{item!r}: --{given} is ambiguous (" + ", ".join(f"--{m}" for m in sorted(matches)) + ")")
    close = difflib.get_close_matches(given, LONG, n=1, cutoff=NEAR_MISS)
    if close:
        raise ValueError(f"{item!r}: sbatch has no option --{given}; did you mean --{close[0]}?")
    if not _NAME.match(given):
        raise ValueError(f"{item!r}: not an option name; write each as on sbatch's command line, e.g. --reservation=ml")
    return given  # a plugin's or a newer Slurm's: checked against the cluster's sbatch at submit


SINCE: dict[str, tuple[int, int]] = {"stepmgr": (24, 5), "segment": (24, 11), "oom-kill-step": (24, 11)}
"""Options in the table that only newer Slurm versions have (their release notes), by the version that added them."""


def too_new(items: list[str], version: tuple[int, int]) -> list[str]:
    """The options among normalized ``items`` that the cluster's Slurm ``version`` does not have yet."""
    names = (item.partition("=")[0][2:] for item in items)
    return [
        f"--{name} (Slurm {SINCE[name][0]}.{SINCE[name][1]:02d})" for name in names if SINCE.get(name, (0, 0)) > version
    ]


def clusters(items: list[str]) -> str | None:
    """The ``--clusters`` (``-M``) value among normalized ``items``: every Slurm command of the run names it."""
    given = [item.partition("=")[2] for item in items if item.startswith("--clusters=")]
    return given[-1] if given else None


def site_options(items: list[str]) -> list[str]:
    """The options among normalized ``items`` that are not sbatch's own as this table knows them (``--name``)."""
    return [name for name in (item.partition("=")[0] for item in items) if name[2:] not in LONG]


def offered(help_text: str) -> set[str]:
    """Every long option the cluster's ``sbatch --help`` names, its plugins' (SPANK) included."""
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", help_text))
