"""``cloudddp storage``: what a user's Slurm runs left on the cluster, by size, and removing what no live job uses.

The Slurm backend contributes it to the command line through the ``cloudddp.commands`` entry-point group
(docs/writing-a-backend.md): it is imported only when it is run.
"""

from __future__ import annotations

from pathlib import Path

import click

from cloudddp.backends.commands import json_option, load_job, override_option
from cloudddp.backends.slurm import storage as slurm_storage
from cloudddp.backends.slurm.options import SlurmOptions
from cloudddp.backends.slurm.shell import Shell
from cloudddp.backends.slurm.workdir import workdir
from cloudddp.observe.console import escape, out, print_json
from cloudddp.observe.units import human_bytes


@click.command()
@click.argument("job", type=click.Path(path_type=Path, dir_okay=False), required=False)
@override_option
@click.option("--remove", is_flag=True, help="Remove every entry no live job uses and nothing changed in lately.")
@click.option(
    "--checkpoints",
    is_flag=True,
    help="With --remove, unused checkpoint folders too (a resubmit resumes from them, so they are kept otherwise).",
)
@click.option(
    "--quiet-minutes",
    type=click.IntRange(0),
    default=60,
    show_default=True,
    help="An entry in which something changed within this many minutes is kept (a submit may be under way).",
)
@json_option
def storage(
    job: Path | None, override: tuple[str, ...], remove: bool, checkpoints: bool, quiet_minutes: int, json_: bool
) -> None:
    """What your Slurm runs left in their working folder on the cluster (run folders, code snapshots,
    environments, container images, checkpoints), largest first, and which live job uses each. JOB's slurm
    section says where (login_host, workdir); without JOB, Slurm's commands on this machine and the default
    working folder ($CLOUDDDP_SLURM_WORKDIR, $SCRATCH/cloudddp or $WORK/cloudddp, else $CLOUDDDP_HOME/slurm).

    \b
    Examples:
      cloudddp storage job.yaml
      cloudddp storage job.yaml --remove
    """
    opts: SlurmOptions = load_job(job, override).section("slurm") if job else SlurmOptions()
    shell = Shell(opts.login_host, tuple(opts.ssh_options))
    folder = workdir(opts, shell)
    entries = slurm_storage.survey(shell, folder, quiet_minutes)
    chosen = [e for e in entries if e.removable(checkpoints)] if remove else []
    slurm_storage.remove(shell, folder, chosen)
    if json_:
        rows = [{"path": e.path, "bytes": e.kib * 1024, "used_by": e.used_by, "recent": e.fresh} for e in entries]
        print_json({"workdir": folder, "entries": rows, "removed": [e.path for e in chosen]})
        return
    console = out()
    console.print(f"{escape(folder)} {escape(shell.where)}: {human_bytes(sum(e.kib for e in entries) * 1024)}")
    gone = {e.path for e in chosen}
    for e in entries:
        console.print(f"  {human_bytes(e.kib * 1024):>9}  {escape(e.path)}  {_state(e, gone, checkpoints)}")
    freed = sum(e.kib for e in chosen) * 1024
    console.print(f"removed {len(chosen)} entries, {human_bytes(freed)}" if remove else "remove with --remove")


def _state(entry: slurm_storage.Entry, gone: set[str], checkpoints: bool) -> str:
    if entry.path in gone:
        return "removed"
    if entry.used_by:
        return f"in use by {entry.used_by}"
    if entry.fresh:
        return "changed lately: kept"
    return "unused checkpoints (kept without --checkpoints)" if not entry.removable(checkpoints) else "unused"
