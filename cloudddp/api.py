"""The Python API: the same verbs as the CLI, for scripts and notebooks.

import cloudddp
job = cloudddp.Job.load("jobs/digits-local.yaml", overrides=["resources.nodes=1"])
print(job.render("sagemaker").text())
run = job.submit("local")
for record in run.metrics(follow=True):
    print(record.epoch, record.values)
run.wait()
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from cloudddp.backends.base import Backend, Progress
from cloudddp.backends.plugins import backend_class, load_spec, spec_from_dict
from cloudddp.backends.status import LogLine, RunState, RunStatus
from cloudddp.errors import RunNotFound, UserError
from cloudddp.injob.culprit import Capture
from cloudddp.observe.metrics import MetricRecord
from cloudddp.observe.notebook import warnings_html, watch
from cloudddp.observe.plotting import plot_metrics
from cloudddp.plan import Plan
from cloudddp.runs import recovery
from cloudddp.runs.chained import ChainedRun
from cloudddp.runs.cost import CostReport
from cloudddp.runs.database import RunDatabase
from cloudddp.runs.placement import Placement, survey
from cloudddp.runs.runner import Confirm, get_backend
from cloudddp.runs.submit import submit as submit_job
from cloudddp.spec.load import spec_to_data
from cloudddp.spec.model import JobSpec


class Job:
    """A validated job spec, ready to render or submit on any backend."""

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec

    @classmethod
    def load(cls, path: str | Path, overrides: Sequence[str] = ()) -> Job:
        """Read a YAML job spec; ``overrides`` are ``key.path=value`` strings, as ``-o`` on the CLI."""
        return cls(load_spec(path, overrides))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, base_dir: str | Path = ".", overrides: Sequence[str] = ()) -> Job:
        return cls(spec_from_dict(data, base_dir=base_dir, overrides=overrides))

    @classmethod
    def create(cls, name: str, *, base_dir: str | Path = ".", **sections: Any) -> Job:
        """Build a spec from keyword arguments: ``Job.create("demo", code={"dir": "src_train"})``."""
        return cls.from_dict({"name": name, **sections}, base_dir=base_dir)

    def override(self, *assignments: str, **fields: Any) -> Job:
        """A new Job with ``key.path=value`` assignments and/or top-level fields replaced."""
        data = {**spec_to_data(self.spec, reveal_secrets=True), **fields}
        return Job(spec_from_dict(data, base_dir=self.spec.base_dir, overrides=assignments))

    def render(self, backend: str = "local", **options: Any) -> Plan:
        """What ``backend`` would send for this job (``options`` construct the backend, e.g. a credential)."""
        return backend_class(backend)(**options).render(self.spec)

    def submit(
        self,
        backend: str = "local",
        *,
        checks: bool = True,
        provision: bool = True,
        recover: int | None = None,
        progress: Progress | None = None,
        resume_from: str | None = None,
        ranking: list[Placement] | None = None,
        confirm: Confirm | None = None,
        **options: Any,
    ) -> Run:
        """Render, run the preflight checks, launch; returns at once with a :class:`Run`.

        ``checks=False`` launches even when a preflight check fails; ``provision=False`` leaves clusters
        alone on backends that create them; ``recover`` resubmissions after preemption or infrastructure
        faults (default: ``limits.max_recoveries``), done by a detached watcher. ``options`` construct the
        backend (e.g. a credential; the watcher uses the backend's defaults). ``resume_from`` (a run id) carries
        that run's latest checkpoint, from whichever backend it ran on, into this job's checkpoint folder first.

        ``backend="auto"`` places the job on the best of :meth:`place`'s ranking (``ranking``, when already asked)
        that takes it, and moves it to the next on a capacity failure (docs/placement.md). ``confirm`` is asked with
        each plan before it is sent; a no raises :class:`~cloudddp.errors.Declined` (:mod:`cloudddp.runs.submit`).
        """
        source = Run.attach(resume_from)._one.checkpoints() if resume_from else None
        submitted = submit_job(
            self.spec,
            backend,
            checks=checks,
            provision=provision,
            recover=recover,
            progress=progress,
            resume_from=source,
            ranking=ranking,
            confirm=confirm,
            **options,
        )
        return Run(submitted.run_id, submitted.backend, plan=submitted.plan)

    def place(self, *, checks: bool = True) -> list[Placement]:
        """``-b auto``'s ranking for this job: each backend of ``backends:`` (or the user configuration) with its
        estimated cost and start, best first, then those that cannot take it with the reason (``checks``: ask each
        backend's preflight checks too, which reach the clouds)."""
        return survey(self.spec, checks=checks)

    def to_dict(self) -> dict[str, Any]:
        return spec_to_data(self.spec)

    def __repr__(self) -> str:
        resources = self.spec.resources
        return f"Job(name={self.spec.name!r}, nodes={resources.nodes}, gpus_per_node={resources.gpus_per_node})"


class Run:
    """A submitted run on any backend."""

    def __init__(self, run_id: str, backend: Backend[Any], *, plan: Plan | None = None) -> None:
        self.run_id = run_id
        self.backend = backend
        self.plan = plan
        """The plan this run was launched from, when it was submitted in this process."""

    @classmethod
    def attach(cls, run_id: str, backend: str | None = None, **options: Any) -> Run:
        """The run ``run_id`` (or a unique prefix or suffix of it) from this machine's run database, or at
        ``backend``."""
        matches = RunDatabase().named(run_id, backend)
        if len(matches) > 1:
            ids = ", ".join(m.run_id for m in matches[:5])
            raise UserError(f"{run_id!r} matches {len(matches)} runs ({ids}); give more of the id")
        if matches:
            return cls(matches[0].run_id, get_backend(matches[0].backend, **options))
        if backend is None:
            raise RunNotFound(
                f"no run {run_id!r} in this machine's run database",
                hint="`cloudddp list` shows known runs; for a cloud job started elsewhere add --backend",
            )
        return cls(run_id, get_backend(backend, **options))

    @property
    def _one(self) -> ChainedRun:
        """This run as its person sees it: every attempt of its recovery chain (when it has one) as one."""
        return ChainedRun(self.run_id, self.backend)

    def status(self) -> RunStatus:
        """The run's status now; this machine's run database is brought up to date with it, and when a run
        has just ended its measured step time is kept for the next estimate of the job (cloudddp.catalog.stepstore). For
        a run under recovery: the chain's state, with every attempt and why it ended in ``details["attempts"]``."""
        return self._one.status()

    def cost(self) -> CostReport:
        """What the run cost (so far, while it goes) next to the estimate its plan had at submit, every figure with
        its source; without figures from the backend, the reason (:meth:`cloudddp.runs.runner.Runner.cost`). For a
        run under recovery: the current attempt's bill, and every attempt's cost with their total in ``attempts``."""
        return self._one.cost()

    @property
    def chain(self) -> recovery.Chain | None:
        """The recovery chain this run belongs to, when it was submitted with recovery."""
        return self._one.chain

    @property
    def warnings(self) -> list[str]:
        """What the run's person should know besides its state, as the command line prints it: its plan's warnings
        (``render().warnings``, for a run submitted in this process), then, once the run has ended and its status
        was read (:meth:`wait` reads it), what its end says of the checkpoint it resumed: "nothing left to train"
        for a run that resumed a finished training, or a checkpoint that does not fit the model."""
        return [*(self.plan.warnings if self.plan is not None else []), *self._one.notes()]

    def wait(self, timeout: float | None = None, poll: float = 1.0) -> RunStatus:
        """Block until the run ends (or ``timeout`` seconds pass) and return its status."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.status()
            if status.state.terminal or (deadline is not None and time.monotonic() >= deadline):
                return status
            time.sleep(poll)

    def logs(self, follow: bool = False) -> Iterator[LogLine]:
        """The run's log lines (every attempt's, in order, for a run under recovery)."""
        return self._one.logs(follow)

    def metrics(self, follow: bool = False) -> Iterator[MetricRecord]:
        """The run's metric records; under recovery, every attempt's, each step once (an attempt that
        resumes from a checkpoint repeats the steps after it: the first report of a step is kept)."""
        return self._one.metrics(follow)

    def events(self, follow: bool = False, all_ranks: bool = False) -> Iterator[MetricRecord | LogLine]:
        """What a person watching the run sees, in the order it was printed: global rank 0's lines (every line,
        the runtime's included, with ``all_ranks``), each followed by the metric record it carries — the same
        records as :meth:`metrics` on every backend (global rank 0's, or every rank's with ``metrics.ranks:
        all``). A line a declared pattern matched is shown *and* its record (marked ``echoed``: ``submit``'s view
        shows such a line once, as printed); a ``CLOUDDDP_METRIC`` line is shown
        as its record (the line is that record's machine form)."""
        return self._one.events(follow, all_ranks)

    def metrics_frame(self) -> Any:
        """The metrics so far as a pandas DataFrame (needs the ``notebook`` extra)."""
        try:
            import pandas as pd
        except ImportError:
            raise UserError("metrics_frame() needs pandas: pip install 'cloudddp[notebook]'") from None
        return pd.DataFrame([r.to_dict() for r in self.metrics()])

    def stacks(self) -> Capture:
        """Every rank's Python stacks now, each rank once (``cloudddp stacks``): grouped with
        :func:`cloudddp.injob.culprit.render`, who stands out in ``.verdict()``. The run goes on, untouched. For a run
        under recovery: its current attempt's ranks."""
        return self._one.stacks()

    def cancel(self) -> bool:
        """Ask the run to stop (it checkpoints first); False when it had already ended. A run under
        recovery stops being recovered."""
        return self._one.cancel()

    async def wait_async(self, timeout: float | None = None, poll: float = 1.0) -> RunStatus:
        """``await run.wait_async()`` in a notebook: the event loop (and the notebook) stay responsive."""
        import asyncio

        return await asyncio.to_thread(self.wait, timeout, poll)

    async def metrics_async(self, follow: bool = False) -> AsyncIterator[MetricRecord]:
        """``async for record in run.metrics_async(follow=True)``: each record read in a worker thread."""
        import asyncio

        it = iter(self.metrics(follow=follow))
        done = object()
        while (record := await asyncio.to_thread(next, it, done)) is not done:
            yield record  # type: ignore[misc]

    def watch(self, poll: float = 1.0) -> RunStatus:
        """In a notebook: status and a live loss/accuracy plot until the run ends (needs matplotlib)."""
        status: RunStatus = watch(self, poll=poll)
        return status

    def plot(self, path: str | Path | None = None) -> Any:
        """A matplotlib figure of every metric over steps; saved as PNG when ``path`` is given."""
        return plot_metrics(list(self.metrics()), title=f"{self.run_id} ({self.status().state.value})", path=path)

    def _repr_html_(self) -> str:
        return self.status()._repr_html_() + warnings_html(self.warnings)

    @property
    def done(self) -> bool:
        return self.status().state.terminal

    def __repr__(self) -> str:
        return f"Run({self.run_id!r}, backend={self.backend.name!r})"


__all__ = ["Job", "LogLine", "MetricRecord", "Plan", "Run", "RunState", "RunStatus"]
