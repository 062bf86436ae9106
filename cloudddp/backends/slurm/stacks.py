"""``cloudddp stacks`` on a Slurm run: one ``srun --overlap`` step on every node of the job (it shares the job's
resources, so it starts while the training holds them all) runs :mod:`cloudddp.injob.rank_stacks` with the node's
``python3``, which finds each rank's program by ``SLURM_JOB_ID`` and asks it once; what the signalled ranks write
is read from the node logs as they grow, each line labelled as ``cloudddp logs`` labels it."""

from __future__ import annotations

import json
from pathlib import Path

from cloudddp.backends.slurm.logs import Labels
from cloudddp.backends.slurm.record import SlurmRunInfo
from cloudddp.backends.slurm.shell import on_cluster
from cloudddp.errors import UserError
from cloudddp.injob import rank_stacks
from cloudddp.injob.culprit import Capture, captured
from cloudddp.injob.rank_stacks import Answer, answered, gather

_SIZES = 'for f; do if [ -f "$f" ]; then wc -c < "$f"; else echo 0; fi; done'


def capture(info: SlurmRunInfo) -> Capture:
    """Every rank's stacks now; the job goes on."""
    shell = info.shell
    offsets = [int(n) for n in shell.text(["bash", "-c", _SIZES, "cloudddp-sizes", *info.node_logs]).split()]
    source = Path(rank_stacks.__file__).read_text()
    step = ["srun", *on_cluster(info.cluster), "--overlap", f"--jobid={info.job_id}", f"--nodes={info.nodes}"]
    step += [f"--ntasks={info.nodes}", "--ntasks-per-node=1", "--quiet"]
    done = shell.run(
        [*step, "python3", "-c", source, "SLURM_NODEID", f"SLURM_JOB_ID={info.job_id}", "SLURMD_NODENAME"], check=False
    )
    said = done.stdout.decode(errors="replace").splitlines()
    answers = [Answer(**json.loads(line)) for line in said if line.startswith("{")]
    if not answers and done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip()
        raise UserError(f"could not reach the nodes of Slurm job {info.job_id}: {why}", hint="cloudddp logs RUN")
    labels = Labels(info.nodes, per_task=info.launch == "srun", per_node=info.processes_per_node)
    for a in answers:
        labels.ranks[int(a.node), a.local] = a.rank
    tails = _Tails(info, offsets, labels)
    dumps = gather(tails.lines, [a.rank for a in answers if a.how == "signal"])
    return captured(a.__dict__ for a in answered(answers, dumps))


class _Tails:
    """The lines the node logs gain, one read of them all per call, as ``(rank, text)``."""

    def __init__(self, info: SlurmRunInfo, offsets: list[int], labels: Labels) -> None:
        self.info, self.offsets, self.labels = info, offsets, labels
        self.partial = [b""] * len(offsets)

    def lines(self) -> list[tuple[int, str]]:
        chunks = self.info.shell.read_from(list(zip(self.info.node_logs, self.offsets, strict=True)))
        found = []
        for node, chunk in enumerate(chunks):
            if not chunk:
                continue
            self.offsets[node] += len(chunk)
            *complete, self.partial[node] = (self.partial[node] + chunk).split(b"\n")
            for raw in complete:
                line, _ = self.labels.line(node + 1, raw.decode("utf-8", errors="replace"))
                if line.rank is not None:
                    found.append((line.rank, line.text))
        return found
