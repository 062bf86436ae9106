"""What ``doctor`` and a launch check on the cluster before submitting: Slurm answers, its KillWait (and the
partition's GraceTime, where it preempts) give the training the SIGTERM grace the plan counts on, the partition
exists and its MaxTime admits the job's time limit, the working folder (resolved first where render left it to
submit) is writable and nobody else's to write in, and the inputs are there."""

from __future__ import annotations

import re
import socket
import subprocess
from collections.abc import Iterator

from cloudddp.backends.checks import Check
from cloudddp.backends.slurm import flags
from cloudddp.backends.slurm.answers import parse_pairs
from cloudddp.backends.slurm.request import SlurmRequest, SlurmTarget
from cloudddp.backends.slurm.shell import Shell, on_cluster
from cloudddp.backends.slurm.workdir import bound
from cloudddp.errors import CloudDDPError, UserError
from cloudddp.plan import Plan

PRIVATE = (
    'real=$(readlink -f -- "$1") || { echo "its real path cannot be found"; exit 1; }; '
    'test -O "$real" || { echo "owned by another user"; exit 1; }; '
    'if [ -n "$(find "$real" -maxdepth 0 -perm /022)" ]; then echo "others may write in it"; exit 1; fi; '
    'up=$real; while [ "$up" != / ]; do up=$(dirname -- "$up"); '
    'if [ -n "$(find "$up" -maxdepth 0 -perm -002 ! -perm -1000)" ]; then '
    'echo "anyone may write in $up on its path"; exit 1; fi; done'
)
"""The working folder, where a link to it points, is the user's and nobody else may write in it, and no folder above
it is one anyone may write in without the sticky bit (she could rename the working folder away and put hers in its
place). A folder above it that a group may write in passes: sites share project folders so."""
_INPUT_PREFIX = "CLOUDDDP_INPUT_"


def preflight(plan: Plan[SlurmRequest, SlurmTarget]) -> list[Check]:
    """The checks, in the order ``doctor`` prints them; only the first when Slurm does not answer."""
    shell = Shell.of(plan.target)
    try:
        version = shell.text(["sbatch", "--version"])
    except CloudDDPError as e:
        return [_unreachable(plan.target.login_host, str(e).splitlines()[0])]
    checks = [Check("Slurm reachable", True, f"{version} {shell.where}")]
    checks += _options_checks(shell, plan, version)
    checks += _partition_checks(shell, plan)
    checks += _workdir_checks(shell, plan)
    checks += _input_checks(shell, plan.request.env)
    return checks


def _unreachable(login_host: str | None, error: str) -> Check:
    """Why Slurm does not answer, and the fix that applies: no login host set, one whose name does not resolve
    (after ~/.ssh/config, as ssh reads it), or one ssh reaches but cannot use."""
    if login_host is None:
        return Check("Slurm reachable", False, error, fix="run on the cluster's login node, or set slurm.login_host")
    name = _ssh_hostname(login_host)
    try:
        socket.getaddrinfo(name, None)
    except (OSError, UnicodeError):
        return Check(
            "Slurm reachable",
            False,
            f"slurm.login_host {login_host}: {name} does not resolve ({error})",
            fix="correct the host name in slurm.login_host (or give it a HostName in ~/.ssh/config)",
        )
    return Check("Slurm reachable", False, error, fix=f"make `ssh {login_host} sbatch --version` work from here")


def _ssh_hostname(login_host: str) -> str:
    """The name ssh connects to for ``login_host`` (``user@`` dropped, ~/.ssh/config's HostName applied)."""
    host = login_host.rpartition("@")[2]
    try:
        config = subprocess.run(["ssh", "-G", login_host], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return host
    found = re.search(r"^hostname (\S+)$", config, flags=re.MULTILINE)
    return found[1] if found else host


def _options_checks(shell: Shell, plan: Plan[SlurmRequest, SlurmTarget], version: str) -> list[Check]:
    """The spec's sbatch options this cluster's sbatch has: a plugin's (SPANK) or a newer Slurm's option, which the
    table does not know, is looked for in its ``sbatch --help``; one the table knows from a newer Slurm than the
    cluster's (``sbatch --version``) is named with the version that has it. Asked only when there are such."""
    given = [line.removeprefix("#SBATCH ") for line in plan.documents["job.sbatch"].splitlines()]
    given = [item for item in given if item.startswith("--")]
    found = re.search(r"(\d+)\.(\d+)", version)
    missing = flags.too_new(given, (int(found[1]), int(found[2])) if found else (99, 0))
    unknown = flags.site_options(given)
    if unknown:
        offered = flags.offered(shell.text(["sbatch", "--help"]))
        missing += [
            f"{name} (not in its sbatch --help, its plugins' options included)"
            for name in unknown
            if name not in offered
        ]
    if not missing and not unknown:
        return []
    return [
        Check(
            "sbatch options",
            not missing,
            "this cluster's sbatch has no " + ", ".join(missing)
            if missing
            else "the cluster's sbatch offers " + ", ".join(unknown),
            fix="remove them from slurm.sbatch_options, or load the plugin that offers them (plugstack.conf)",
        )
    ]


def _cluster(plan: Plan[SlurmRequest, SlurmTarget]) -> list[str]:
    """``-M`` with the (first) cluster sbatch's ``--clusters`` names: the checks are about the job's cluster."""
    first = (plan.request.clusters or "").split(",")[0]
    return on_cluster(first if first != "all" else None)


def _grace_check(shell: Shell, plan: Plan[SlurmRequest, SlurmTarget], partition: dict[str, str] | None) -> Check:
    """The grace the script is told (CLOUDDDP_SIGTERM_GRACE) is no longer than any Slurm gives: KillWait (a cancel,
    a requeue, the time limit) and, where the partition preempts with a grace time, its GraceTime."""
    config = dict(_config_pairs(shell.text(["scontrol", *_cluster(plan), "show", "config"])))
    given = {"KillWait": int(config.get("KillWait", "30 sec").split()[0])}
    row = partition or {}
    preempts = row.get("PreemptMode", "OFF").upper() not in ("OFF", "")
    grace_time = int(row.get("GraceTime", "0") or 0)
    if preempts and grace_time:
        given["GraceTime"] = grace_time
    told = int(plan.request.env.get("CLOUDDDP_SIGTERM_GRACE", plan.request.kill_wait))
    said = ", ".join(f"{name} {seconds} s" for name, seconds in given.items())
    fix = f"set slurm.kill_wait: {given['KillWait']}"
    if "GraceTime" in given:
        fix += f" and slurm.grace_time: {given['GraceTime']} (partition {row.get('PartitionName', '?')})"
    return Check(
        "SIGTERM grace",
        told <= min(given.values()),
        f"the cluster gives {said}; the script is told {told} s",
        fix=fix,
    )


def _partition_checks(shell: Shell, plan: Plan[SlurmRequest, SlurmTarget]) -> list[Check]:
    """The script's partition exists (when it names one), and its time limit is within that partition's (or
    the default partition's) MaxTime."""
    partition = next(
        (
            line.split("=", 1)[1]
            for line in plan.documents["job.sbatch"].splitlines()
            if line.startswith("#SBATCH --partition=")
        ),
        None,
    )
    which = [partition.split(",")[0]] if partition else []
    known = shell.run(["scontrol", *_cluster(plan), "-o", "show", "partition", *which], check=False)
    text = known.stdout.decode(errors="replace")
    rows = [parse_pairs(line) for line in text.splitlines() if line.startswith("PartitionName=")]
    row = rows[0] if partition and rows else next((r for r in rows if r.get("Default") == "YES"), None)
    checks = [_grace_check(shell, plan, row)]
    if partition:
        checks.append(
            Check(
                f"partition {partition}",
                known.returncode == 0,
                "exists" if known.returncode == 0 else "Slurm does not know it",
                fix="`sinfo -s` lists the partitions",
            )
        )
    return checks + _time_limit_check(plan, row)


def _workdir_checks(shell: Shell, plan: Plan[SlurmRequest, SlurmTarget]) -> list[Check]:
    try:
        workdir = bound(plan).request.workdir
    except UserError as e:
        return [Check("working folder", False, str(e.args[0]), fix=e.hint or "set slurm.workdir")]
    writable = shell.run(["bash", "-c", 'mkdir -p -m 700 "$1" && test -w "$1"', "-", workdir], check=False)
    checks = [
        Check(
            "working folder writable",
            writable.returncode == 0,
            workdir,
            fix="set slurm.workdir to a folder you can write on the shared filesystem",
        )
    ]
    if writable.returncode == 0:
        # Its code snapshots (checked by sha256), unpacked run folders and requirements environments run as
        # you: whoever else may write in it could change them.
        private = shell.run(["bash", "-c", PRIVATE, "-", workdir], check=False)
        why = private.stdout.decode(errors="replace").strip() or "others may write in it"
        checks.append(
            Check(
                "working folder yours alone",
                private.returncode == 0,
                workdir if private.returncode == 0 else f"{workdir}: {why}",
                fix=f"chmod go-w {workdir} (it must be yours, and only yours to write), or set "
                "slurm.workdir to a folder of your own",
            )
        )
    return checks


def _input_checks(shell: Shell, env: dict[str, str]) -> list[Check]:
    """Each input the job reads is on the cluster's filesystem (the job's environment says where)."""
    checks = []
    for name, value in env.items():
        if name.startswith(_INPUT_PREFIX):
            there = shell.run(["test", "-e", value], check=False).returncode == 0
            checks.append(
                Check(
                    f"input {name[len(_INPUT_PREFIX) :].lower()} exists",
                    there,
                    value,
                    fix="put the data on the cluster's filesystem and give inputs.<name>.at.slurm",
                )
            )
    return checks


def _time_limit_check(plan: Plan[SlurmRequest, SlurmTarget], row: dict[str, str] | None) -> list[Check]:
    """The script's --time against the partition's MaxTime: a longer one would wait in the queue forever
    (Reason=PartitionTimeLimit), or be refused."""
    script = plan.documents["job.sbatch"].splitlines()
    wanted = next((line.split("=", 1)[1] for line in script if line.startswith("#SBATCH --time=")), None)
    if row is None or wanted is None:
        return []
    limit, asked = _slurm_minutes(row.get("MaxTime", "UNLIMITED")), _slurm_minutes(wanted)
    name = row.get("PartitionName", "?")
    if limit is None or asked is None or asked <= limit:
        return [Check("time limit", True, f"{wanted} within partition {name}'s MaxTime {row.get('MaxTime')}")]
    return [
        Check(
            "time limit",
            False,
            f"the job asks for {wanted}, longer than partition {name}'s MaxTime {row.get('MaxTime')}: Slurm "
            "would never start it",
            fix=f"set slurm.partition_time_limit: {limit}m (a longer limits.max_runtime then runs as a chain of "
            "requeued allocations)",
        )
    ]


def _slurm_minutes(value: str) -> int | None:
    """Slurm's ``[days-]hours:minutes:seconds`` (or ``minutes``) in whole minutes; None for UNLIMITED/INFINITE."""
    days, _, clock = value.rpartition("-") if "-" in value else ("0", "", value)
    parts = clock.split(":")
    if not days.isdigit() or not all(p.isdigit() for p in parts) or len(parts) > 3:
        return None
    if len(parts) == 1:
        return int(days) * 1440 + int(parts[0])
    hours, minutes, seconds = ([0] * (3 - len(parts)) + [int(p) for p in parts])[-3:]
    return int(days) * 1440 + hours * 60 + minutes + (1 if seconds else 0)


def _config_pairs(text: str) -> Iterator[tuple[str, str]]:
    """``scontrol show config`` lines (``Name = value``)."""
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep:
            yield name.strip(), value.strip()
