"""When a job would start, asked of Slurm without submitting it: ``sbatch --test-only`` with the plan's script.

``sbatch --test-only`` validates the script and asks the scheduler for an estimate ("sbatch: Job 12 to start at
2026-11-27T17:20:00 using 2 processors on nodes n1 in partition debug"), submitting nothing. The script comes on
stdin, so nothing is written on the cluster; its ``#SBATCH`` lines are the job's own, with the working folder
resolved first where render left it to submit. The estimate is the scheduler's (backfill's) and may move; an
answer that cannot be read is None (no estimate), never an error.
"""

from __future__ import annotations

import datetime
import re

from cloudddp.backends.slurm.request import SlurmRequest, SlurmTarget
from cloudddp.backends.slurm.shell import Shell
from cloudddp.backends.slurm.workdir import bound
from cloudddp.plan import Plan

SCRIPT = "job.sbatch"
_START = re.compile(r"to start at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)")


def start_estimate(plan: Plan[SlurmRequest, SlurmTarget]) -> float | None:
    """The Unix time the scheduler expects the plan's job to start, or None when it does not say."""
    if SCRIPT not in plan.documents:
        return None
    plan = bound(plan)
    shell, script = Shell.of(plan.target), plan.documents[SCRIPT]
    flags = [word for word in plan.request.sbatch[1:-1] if word != "--parsable"]
    done = shell.run(["sbatch", "--test-only", *flags], stdin=script.encode(), check=False)
    match = _START.search(done.stderr.decode(errors="replace") + done.stdout.decode(errors="replace"))
    if done.returncode != 0 or not match:
        return None
    # Slurm prints the controller's local time, without a zone: read it as this machine's local time.
    return datetime.datetime.fromisoformat(match.group(1)).timestamp()
