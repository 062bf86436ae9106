"""The Slurm backend: the job spec as an sbatch script, run through Slurm's own tools.

``render`` writes the script offline (``#SBATCH`` lines from the spec, one ``srun`` starting a torchrun agent
per node, or one task per process). ``launch`` puts the code snapshot on the cluster's shared filesystem
(content-addressed, unpacked into the run's folder), writes the script there and submits it with
``sbatch --parsable``; the job's name is the run id, so a retried launch finds its job instead of submitting
another. Status comes from ``scontrol show job`` (then ``sacct``), asked at most once per
``slurm.status_every`` seconds per run (longer while the job waits in the queue unchanged); logs and
metrics come from the per-node output files, read on their own without asking the controller; cancel is
``scancel`` (SIGTERM first, KillWait seconds to checkpoint). Every command runs here or on
``slurm.login_host`` through ssh, built the same way (:mod:`.shell`).

Its modules: the ``slurm:`` section and its ``sbatch_options`` (``options.py``, ``flags.py``); the render: its
choices (``decide.py``), the typed request, the sbatch script and how it is built (``request.py``, ``script.py``,
``build.py``), the rendezvous lines and their store wrappers (``rendezvous.py``, ``agent.py``), where a run's files
are (``layout.py``), where inputs, outputs and checkpoints are on the cluster (``paths.py``) and the plan's lines
(``explain.py``); the working folder, and its placeholder until submit (``workdir.py``); the launch (``launch.py``),
with the requirements environment (``envs.py``) and container images (``images.py``); the preflight
(``preflight.py``) and the start estimate (``start.py``); status from Slurm's answers (``status.py``,
``answers.py``) and the run's record (``record.py``); logs (``logs.py``); every rank's stacks on demand
(``stacks.py``); what runs left on the cluster (``storage.py``) and the ``cloudddp storage`` command that shows it
(``command.py``); the checkpoint folder on the cluster as a store (``checkpoint_store.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from cloudddp.backends.base import Backend, Launched, Progress
from cloudddp.backends.checks import Check
from cloudddp.backends.features import Capabilities, Feature
from cloudddp.backends.slurm.build import build
from cloudddp.backends.slurm.checkpoint_store import SlurmCheckpoints
from cloudddp.backends.slurm.decide import decide
from cloudddp.backends.slurm.explain import explain
from cloudddp.backends.slurm.launch import cancel, submit
from cloudddp.backends.slurm.logs import Labels, follow_batches
from cloudddp.backends.slurm.options import SlurmOptions
from cloudddp.backends.slurm.preflight import preflight
from cloudddp.backends.slurm.record import SlurmRunInfo
from cloudddp.backends.slurm.request import SlurmRequest, SlurmTarget
from cloudddp.backends.slurm.shell import Shell
from cloudddp.backends.slurm.stacks import capture
from cloudddp.backends.slurm.start import start_estimate
from cloudddp.backends.slurm.status import Polls, current_status
from cloudddp.backends.slurm.workdir import in_place
from cloudddp.backends.status import LogLine, RunStatus
from cloudddp.injob.culprit import Capture
from cloudddp.plan import Plan, substitute
from cloudddp.spec.model import JobSpec
from cloudddp.spec.secrets import redacted_spec_data

SlurmPlan = Plan[SlurmRequest, SlurmTarget]


class SlurmBackend(Backend[SlurmOptions]):
    name: ClassVar[str] = "slurm"
    description: ClassVar[str] = "sbatch on a Slurm cluster (here or through ssh): torchrun per node, c10d rendezvous"
    options_model = SlurmOptions
    request_type = SlurmRequest
    target_type = SlurmTarget
    cloud: ClassVar[str | None] = None  # the cluster's hardware is the cluster's: partitions and constraints say it
    capabilities: ClassVar[Capabilities] = Capabilities(
        unsupported={
            Feature.SMDDP: "the SageMaker data-parallel library runs only on SageMaker; "
            "use -o distribution.backend=auto",
            Feature.REMOTE_INPUTS: "jobs read inputs from the cluster's filesystem; give inputs.<name>.at.slurm: "
            "/a/path/on/the/cluster",
            Feature.PROVISION: "a Slurm cluster exists already; there is nothing to create or leave alone",
        },
        caveats={
            Feature.SPOT: "Slurm has no spot capacity: a preemptible partition or QOS (slurm.partition, slurm.qos) "
            "is the equivalent, and slurm.requeue resumes a preempted job from its checkpoint",
            Feature.MPI: "on Slurm, distribution.launcher: mpi starts one srun task per process (Slurm's own "
            "launcher); the script gets RANK/WORLD_SIZE from SLURM_PROCID/SLURM_NTASKS",
            Feature.SECRET_ENV: "secrets reach the job through sbatch's environment, never the script or a file; "
            "slurmctld keeps a job's environment in its state folder, which the cluster's "
            "administrators can read",
        },
    )

    def __init__(self, *, poll_seconds: float | None = None, token: str | None = None, **base: Any) -> None:
        super().__init__(**base)
        self.poll_seconds = poll_seconds or float(os.environ.get("CLOUDDDP_SLURM_POLL", "1"))
        # seconds between reads of a followed run's logs: one command on the login node each, none to slurmctld
        self.token = token
        self._polls = Polls()

    # -- render ------------------------------------------------------------------------------
    def _render(self, spec: JobSpec) -> SlurmPlan:
        decision = decide(spec, self.options(spec), token=self.token)
        request, documents = build(decision)
        decisions, warnings = explain(decision)
        return Plan(
            backend=self.name,
            job_name=spec.name,
            request=request,
            documents=documents,
            decisions=decisions,
            warnings=warnings,
            uploads=[decision.upload],
            target=SlurmTarget(decision.shell.login_host, decision.shell.ssh_options, decision.places.checkpoint_dir),
            job=redacted_spec_data(spec),
            env_sources=decision.env_sources,
            late=decision.late,
        )

    def _for_attempt(self, plan: SlurmPlan, attempt: int) -> SlurmPlan:
        """A recovery's next attempt: its own run id (the Slurm job name) and run folder; the same code,
        checkpoints and everything else."""
        old = plan.request.run_id
        base = old.removesuffix(f"-r{attempt - 1}") if attempt > 2 else old
        table = {old: f"{base}-r{attempt}"}
        return dataclasses.replace(
            plan, request=substitute(plan.request, table), documents=substitute(plan.documents, table)
        )

    def _avoiding(self, plan: SlurmPlan, hosts: Sequence[str]) -> SlurmPlan:
        """sbatch's ``--exclude`` on the command line (it overrides one among ``slurm.sbatch_options``)."""
        sbatch = plan.request.sbatch
        request = dataclasses.replace(plan.request, sbatch=(sbatch[0], f"--exclude={','.join(hosts)}", *sbatch[1:]))
        return dataclasses.replace(plan, request=request)

    def _checkpoint_store(self, location: str, target: SlurmTarget) -> SlurmCheckpoints:
        """The checkpoint folder on the cluster, through the shell the plan names (here, or ssh to the login
        host); in a working folder left to submit, the one the cluster names now."""
        shell = Shell.of(target)
        return SlurmCheckpoints(shell, in_place(location, shell))

    # -- launch ------------------------------------------------------------------------------
    def _launch(self, plan: SlurmPlan, *, provision: bool, progress: Progress | None) -> Launched:
        return submit(plan, progress)

    def _start_estimate(self, plan: SlurmPlan) -> float | None:
        return start_estimate(plan)

    def _preflight(self, plan: SlurmPlan) -> list[Check]:
        return preflight(plan)

    # -- run verbs ---------------------------------------------------------------------------
    def _record(self, run_id: str) -> SlurmRunInfo | None:
        record = self.records.get(run_id)
        if record is None or record.backend != self.name:
            return None
        return SlurmRunInfo.from_fields(record.info)

    def _describe(self, run_id: str) -> RunStatus | None:
        """The run's status, asked of Slurm at most once per ``slurm.status_every`` seconds (this backend
        object remembers the last answer); while the job waits in the queue unchanged, the wait grows."""
        info = self._record(run_id)
        if info is None:
            return None
        return self._polls.status(run_id, info.status_every, functools.partial(self._ask, run_id, info))

    def _ask(self, run_id: str, info: SlurmRunInfo) -> RunStatus:
        return current_status(self.name, run_id, info)

    def _finished(self, run_id: str) -> bool:
        return self.status(run_id).state.terminal

    def _log_iter(self, run_id: str, *, follow: bool) -> Iterator[LogLine]:
        info = self._record(run_id)
        if info is None:
            return
        paths = [info.batch_log, *info.node_logs]
        labels = Labels(info.nodes, per_task=info.launch == "srun", per_node=info.processes_per_node)
        finished = functools.partial(self._finished, run_id)
        for batch in follow_batches(info.shell, paths, follow=follow, finished=finished, poll=self.poll_seconds):
            yield from labels.ordered(batch)

    def _stacks(self, run_id: str) -> Capture:
        info = self._record(run_id)
        assert info is not None  # the verb has read the run's status
        return capture(info)

    def _cancel(self, run_id: str) -> None:
        info = self._record(run_id)
        if info is None:
            return
        self._polls.forget(run_id)
        cancel(info)


__all__ = ["SlurmBackend", "SlurmOptions"]
