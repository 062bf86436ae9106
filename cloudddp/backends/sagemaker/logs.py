"""A SageMaker job's log lines, tagged with the process that printed them.

CloudWatch Logs keeps one stream per host (``<job>/algo-2-<epoch>``), in which the container's every process
writes: the training toolkit, torchrun or mpirun, and each rank of the program. cloudddp's launcher prefixes
each line the program prints with its global rank (``[rank3]:``, see :mod:`cloudddp.injob.shim`); under the
toolkit's ``mpirun --tag-output`` that prefix follows Open MPI's own (``[1,3]<stdout>:``). A line with the
prefix is that rank's; any other line is from outside the program (the toolkit, the runtime).
"""

from __future__ import annotations

import re

from cloudddp.backends.status import LogLine
from cloudddp.injob.shim import RANK_LINE

_MPI_TAG = re.compile(r"\[\d+,\d+\]<std(?:out|err)>:")


def host_line(host: str, text: str, time: float | None, *, hosts: int) -> LogLine:
    """One line of ``host``'s stream: the rank's (``rank3``, or ``algo-2/rank3`` on more than one host), without
    the prefixes; or the host's own, from outside the program."""
    mpi = _MPI_TAG.match(text)
    start = mpi.end() if mpi else 0
    tag = RANK_LINE.match(text, start)
    if tag is None:
        return LogLine(host, text, time, primary=False)
    rank = int(tag.group(1))
    source = f"{host}/rank{rank}" if hosts > 1 else f"rank{rank}"
    return LogLine(source, text[tag.end() :], time, primary=rank == 0, rank=rank)
