"""The working folder on the cluster, where a user's runs keep their files: which one, and when it is known.

The working folder holds ``runs/<run id>`` (a run's script, logs, outputs and unpacked code),
``code/<sha256>.tar.gz`` (code snapshots), ``envs/<key>`` (requirements environments), ``images/`` (imported
container images, 10–20 GB for NGC's) and ``checkpoints/<job name>`` (what a resubmit resumes from). Clusters
give a small, quota-limited ``$HOME`` and a large scratch space for such files, which sites name in the login
environment (``$SCRATCH``, ``$WORK``). So when ``slurm.workdir`` is not given, the cluster's login shell is asked
(``bash -l``, here or through ssh): ``$CLOUDDDP_SLURM_WORKDIR`` (a site's or a user's setting) as it is, else
``$SCRATCH/cloudddp``, else ``$WORK/cloudddp``; with none, ``$CLOUDDDP_HOME/slurm`` on this machine (with a
login host, which has no folder of this machine's, that is an error naming slurm.workdir).

Render asks nothing (it needs no network): without ``slurm.workdir`` the plan names the folder :data:`WORKDIR`, a
late-bound placeholder, and everything under it (the run folder, the code archive, the default checkpoint folder,
the environments and images, the variables and the script) is written from it. Whatever talks to the cluster about
a plan first fills it (:func:`bound`): the submit, once, before anything is sent, and the preflight, the start
estimate and a checkpoint store each for their own commands.
"""

from __future__ import annotations

from cloudddp.backends.base import Progress
from cloudddp.backends.slurm.options import SlurmOptions, checked_workdir
from cloudddp.backends.slurm.request import SlurmRequest, SlurmTarget
from cloudddp.backends.slurm.shell import Shell
from cloudddp.errors import CloudDDPError, UserError
from cloudddp.paths import home
from cloudddp.plan import Plan, late

LATE = "WORKDIR"
"""The name the plan binds at submit (:attr:`cloudddp.plan.Plan.late`)."""
WORKDIR = late(LATE)
"""The working folder in a plan rendered without ``slurm.workdir``."""
SITE_VARIABLES = ("CLOUDDDP_SLURM_WORKDIR", "SCRATCH", "WORK")
"""What the cluster's login shell may set, in the order asked: a setting naming the folder itself, then the
scratch spaces, under which cloudddp uses a ``cloudddp`` folder."""
_SITE = 'printf "cloudddp-site\\0%s\\0%s\\0%s\\0" "${CLOUDDDP_SLURM_WORKDIR-}" "${SCRATCH-}" "${WORK-}"'


def planned(opts: SlurmOptions, shell: Shell) -> tuple[str, str]:
    """The working folder a plan names (``slurm.workdir``, else :data:`WORKDIR`) and where it comes from, in the
    plan's words."""
    if opts.workdir:
        return opts.workdir, "slurm.workdir"
    here = "" if shell.login_host else ", else $CLOUDDDP_HOME/slurm on this machine"
    asked = ", else ".join(["$" + SITE_VARIABLES[0], *(f"${v}/cloudddp" for v in SITE_VARIABLES[1:])])
    return WORKDIR, f"the cluster's login shell, resolved at submit: {asked}{here}"


def workdir(opts: SlurmOptions, shell: Shell) -> str:
    """The working folder: ``slurm.workdir``, else the one the cluster names (:func:`resolved`)."""
    return opts.workdir or resolved(shell)[0]


def bound(plan: Plan[SlurmRequest, SlurmTarget], progress: Progress | None = None) -> Plan[SlurmRequest, SlurmTarget]:
    """``plan`` with its working folder filled where render left it to submit (one command, here or through ssh);
    ``plan`` itself otherwise."""
    if LATE not in plan.late:
        return plan
    shell = Shell.of(plan.target)
    folder, origin = resolved(shell)
    if progress:
        progress.step(f"working folder {folder} {shell.where} (from {origin})")
    return plan.bind({LATE: folder})


def in_place(path: str, shell: Shell) -> str:
    """``path`` (a plan's or a run record's) with the working folder filled, where it names :data:`WORKDIR`."""
    return path.replace(WORKDIR, resolved(shell)[0]) if WORKDIR in path else path


def resolved(shell: Shell) -> tuple[str, str]:
    """The working folder the cluster's login shell names, else this machine's (no login host), and where it comes
    from; a UserError naming slurm.workdir where there is none."""
    site = site_workdir(shell)
    if site is not None:
        return site[0], f"{site[1]} on the cluster"
    if shell.login_host:
        raise UserError(
            "slurm.workdir: not given, and the cluster's login shell sets none of "
            + ", ".join(f"${v}" for v in SITE_VARIABLES),
            hint="set slurm.workdir to a folder on the cluster's shared filesystem (a scratch space, not $HOME)",
        )
    return str(home() / "slurm"), "$CLOUDDDP_HOME/slurm (the login shell sets no $SCRATCH or $WORK)"


def site_workdir(shell: Shell) -> tuple[str, str] | None:
    """The working folder the cluster's login shell names and the variable naming it; None where none does."""
    try:
        answer = shell.run(["bash", "-lc", _SITE])
    except CloudDDPError as e:
        raise UserError(
            f"slurm.workdir: not given, and the cluster's login shell could not be asked for its scratch folder "
            f"{shell.where}: {str(e).splitlines()[0]}",
            hint="set slurm.workdir to a folder on the cluster's shared filesystem",
        ) from None
    said = answer.stdout.decode(errors="replace").partition("cloudddp-site\0")[2].split("\0")
    for name, value in zip(SITE_VARIABLES, said, strict=False):
        if not value:
            continue
        folder = value if name == SITE_VARIABLES[0] else f"{value.rstrip('/')}/cloudddp"
        try:
            return checked_workdir(folder), f"${name}"
        except ValueError as e:
            raise UserError(
                f"slurm.workdir: not given, and ${name} on the cluster ({value}) cannot hold the working folder: {e}",
                hint="set slurm.workdir to a folder on the cluster's shared filesystem",
            ) from None
    return None
