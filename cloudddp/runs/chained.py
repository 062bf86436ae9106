"""A run as its person sees it: every attempt of a recovery chain as one.

A run submitted with recovery is a chain of attempts (:mod:`cloudddp.runs.recovery`), each a run of its own at the
backend. Asked about by any of its ids, it answers as one run: its status is the chain's, with every attempt and
why it ended; its cost is the current attempt's bill next to every attempt's; its logs and metrics are every
attempt's in order (following the next attempt as the watcher launches it), without the metric records an
attempt repeats after resuming from a checkpoint; cancelling it stops the recovery too. A run without a chain is
its own single attempt. The Python API (:class:`cloudddp.api.Run`) and the command line ask this.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from cloudddp.backends.base import Backend
from cloudddp.backends.records import LaunchInfo
from cloudddp.backends.status import LogLine, RunState, RunStatus
from cloudddp.errors import CloudDDPError, UserError
from cloudddp.injob.culprit import Capture
from cloudddp.observe.metrics import PREFIX, MetricRecord, record_of_log_line
from cloudddp.runs import recovery, resumed
from cloudddp.runs.cost import CostReport
from cloudddp.runs.runner import Checkpoints, Runner


class Repeats:
    """The records an attempt repeats after resuming from a checkpoint: a step already reported (for every metric
    of the record, by the same rank) is a repeat; the first report of a step is kept."""

    def __init__(self) -> None:
        self.last: dict[tuple[int | None, str], int] = {}  # (rank, metric) -> the last step it was reported at

    def seen(self, record: MetricRecord) -> bool:
        if record.step is None or not record.values:
            return False
        keys = [(record.rank, name) for name in record.values]
        if all(record.step <= self.last.get(key, -1) for key in keys):
            return True
        self.last.update(dict.fromkeys(keys, record.step))
        return False


@dataclass(frozen=True)
class ChainedRun:
    """The run ``run_id`` on ``backend``, every attempt of its recovery chain (when it has one) as one run."""

    run_id: str
    backend: Backend[Any]

    @property
    def chain(self) -> recovery.Chain | None:
        """The recovery chain this run belongs to, when it was submitted with recovery."""
        return recovery.chain_of(self.run_id, self.backend)

    def status(self) -> RunStatus:
        """The run's status now (see :meth:`cloudddp.api.Run.status`); for a chain, the current attempt's status
        with the chain's state and message, and every attempt in ``details["attempts"]``."""
        chain = self.chain
        if chain is None:
            return self._status_of(self.run_id)
        recovery.ensure_watched(chain)
        current = self._status_of(chain.current.run_id, chain.backend_of(chain.current))
        state = current.state
        if chain.status == recovery.WATCHING and current.state.terminal:
            state = RunState.STARTING  # the watcher is about to launch the next attempt
        elif chain.status != recovery.WATCHING:
            state = {recovery.SUCCEEDED: RunState.SUCCEEDED, recovery.CANCELLED: RunState.CANCELLED}.get(
                chain.status, RunState.FAILED
            )
        return dataclasses.replace(
            current,
            run_id=self.run_id,
            state=state,
            message=chain.message or current.message,
            details={
                **current.details,
                "attempts": chain.summary(),
                "recovery": chain.status,
                "recoveries_left": chain.recoveries_left,
            },
        )

    def _status_of(self, run_id: str, backend: str | None = None) -> RunStatus:
        return self._runner(backend).status(run_id, notes=True)

    def _runner(self, backend: str | None) -> Runner:
        """The runner of ``backend`` (an attempt's; None or this run's own: this run's backend)."""
        if backend is None or backend == self.backend.name:
            return Runner(self.backend)
        return Runner.open(backend)

    def cost(self) -> CostReport:
        """What the run cost (see :meth:`cloudddp.api.Run.cost`); for a chain, the current attempt's bill against
        the first attempt's estimate, and every attempt's cost in ``attempts``."""
        chain, runner = self.chain, Runner(self.backend)
        if chain is None:
            report = runner.cost(self.run_id)
            if report.measured is None and report.bill is not None and report.bill.final:
                report.measured = self._learn(self.run_id)
            return report
        reports = [self._runner(chain.backend_of(a)).cost(a.run_id) for a in chain.attempts]
        report = dataclasses.replace(reports[-1], run_id=self.run_id, estimate=reports[0].estimate)
        report.attempts = [
            {"run_id": r.run_id, "backend": r.backend, "state": r.state, "cost": r.bill.cost if r.bill else None}
            for r in reports
        ]
        return report

    def _learn(self, run_id: str) -> dict[str, Any] | None:
        try:
            return Runner(self.backend).learn(run_id)
        except CloudDDPError:  # the logs are not readable now: a later status or cost tries again
            return None

    def attempts(self, follow: bool) -> Iterator[tuple[str, bool, Backend[Any]]]:
        """``(run id, follow it, its backend)`` for each attempt in order; while following, the next one as the
        watcher launches it, until the chain has ended."""
        chain = self.chain
        if chain is None:
            yield self.run_id, follow, self.backend
            return
        seen, chain_id = 0, chain.chain_id
        while True:
            chain = recovery.Chain.load(chain_id)
            ended = chain.status != recovery.WATCHING
            for attempt in chain.attempts[seen:]:
                seen += 1
                backend = self._runner(chain.backend_of(attempt)).backend
                yield attempt.run_id, follow and not ended and seen == len(chain.attempts), backend
            if not follow or ended:
                return
            time.sleep(0.5)  # the watcher is about to launch the next attempt, or to end the chain

    def logs(self, follow: bool = False) -> Iterator[LogLine]:
        """Every attempt's log lines, in order."""
        for run_id, following, backend in self.attempts(follow):
            yield from backend.logs(run_id, follow=following)

    def metrics(self, follow: bool = False) -> Iterator[MetricRecord]:
        """Every attempt's metric records, each step once (an attempt that resumes from a checkpoint repeats
        the steps after it: the first report of a step is kept)."""
        repeats = Repeats()
        for run_id, following, backend in self.attempts(follow):
            for record in backend.metrics(run_id, follow=following):
                if not repeats.seen(record):
                    yield record

    def events(self, follow: bool = False, all_ranks: bool = False) -> Iterator[MetricRecord | LogLine]:
        """The lines a person watching sees, each followed by the record it carries (see
        :meth:`cloudddp.api.Run.events`); a record an attempt repeats is left out, as :meth:`metrics` has it."""
        patterns = self.backend.metric_patterns(self.run_id)
        ranks = self.backend.metric_ranks(self.run_id)
        repeats = Repeats()
        for line in self.logs(follow=follow):
            record = record_of_log_line(line, patterns, ranks)
            if record is not None and repeats.seen(record):
                record = None  # as metrics() has it: an attempt that resumed repeats it
            shown = (all_ranks or line.primary or record is not None) and PREFIX not in line.text
            if shown:
                yield line
            if record is not None:
                yield dataclasses.replace(record, echoed=shown)

    def checkpoints(self) -> Checkpoints:
        """Where the run's newest attempt keeps its checkpoints, as its launch recorded it (``--resume-from``)."""
        chain = self.chain
        run_id, backend = self.run_id, self.backend
        if chain is not None:
            run_id, backend = chain.current.run_id, self._runner(chain.backend_of(chain.current)).backend
        record = backend.records.get(run_id)
        target = backend.target_of(LaunchInfo.from_fields(record.info if record else {}).target)
        if target.checkpoints is None:
            raise UserError(
                f"{self.run_id} has no checkpoint folder on record: it kept none (checkpoint.enabled: false), or it "
                "was launched before cloudddp recorded where runs keep them"
            )
        return Checkpoints(run_id, backend, target)

    def notes(self) -> list[str]:
        """What the run's end says of the checkpoint it resumed (:mod:`cloudddp.runs.resumed`: "nothing left to
        train", a checkpoint that does not fit the model), once its status was read after it ended; for a chain,
        its current attempt's."""
        chain = self.chain
        run_id, backend = self.run_id, self.backend
        if chain is not None:
            run_id, backend = chain.current.run_id, self._runner(chain.backend_of(chain.current)).backend
        record = backend.records.get(run_id)
        note = record.info.get(resumed.NOTE) if record is not None else None
        return [note] if isinstance(note, str) and note else []

    def stacks(self) -> Capture:
        """Every rank's stacks of the current attempt (see :meth:`cloudddp.api.Run.stacks`)."""
        chain = self.chain
        if chain is None:
            return self.backend.stacks(self.run_id)
        return self._runner(chain.backend_of(chain.current)).backend.stacks(chain.current.run_id)

    def cancel(self) -> bool:
        """Ask the current attempt to stop, and stop recovering; False when it had already ended."""
        chain = self.chain
        if chain is None:
            return self.backend.cancel(self.run_id)
        recovery.cancel(chain)
        return self._runner(chain.backend_of(chain.current)).backend.cancel(chain.current.run_id)


_ENDED = frozenset(state.value for state in RunState if state.terminal)


def chain_outcome(info: Mapping[str, Any], chains: dict[str, recovery.Chain | None]) -> str:
    """What became of the recovery chain a run is an attempt of, from the run record's ``info``, for ``list``
    beside the attempt's own state (a first attempt that failed and was recovered is no plain failure): empty for a
    run without a chain, and for a chain's last attempt whose own state says it all. ``chains`` caches each chain
    read, by id."""
    kept = recovery.ChainInfo.from_fields(info)
    if not kept.chain or kept.attempt is None:
        return ""
    if kept.chain not in chains:
        found = recovery.Chain.path_of(kept.chain).exists()
        chains[kept.chain] = recovery.Chain.load(kept.chain) if found else None
    chain = chains[kept.chain]
    if chain is None:
        return ""
    last, current = chain.current.number, chain.current.state
    if chain.status == recovery.GAVE_UP:
        return f"not recovered: gave up after attempt {last}"
    if chain.status == recovery.NEEDS_SECRETS:
        return f"recovery waits for its secrets after attempt {last} (cloudddp recover {chain.chain_id} --spec FILE)"
    if kept.attempt == last and (chain.status != recovery.WATCHING or current not in _ENDED):
        return ""
    return {
        recovery.SUCCEEDED: f"recovered: attempt {last} succeeded",
        recovery.CANCELLED: f"recovery cancelled at attempt {last}",
    }.get(chain.status, f"recovering: attempt {last} {current}")
