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
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import secrets as _random
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any, ClassVar

from cloudddp.backends.base import Backend, Launched, Progress
from cloudddp.backends.checks import Check
from cloudddp.backends.features import Capabilities, Feature
from cloudddp.backends.slurm import envs, images
from cloudddp.backends.slurm.logs import Labels, follow_batches
from cloudddp.backends.slurm.options import SlurmOptions
from cloudddp.backends.slurm.script import RDZV_ID_VARIABLE, Job, Layout, render_script
from cloudddp.backends.slurm.shell import Shell
from cloudddp.backends.slurm.state import (
    LIVE,
    STATES,
    TIME_FORMAT,
    cpus_per_gpu,
    failure,
    from_sacct,
    held,
    parse_pairs,
    requeue_reasons,
    timestamp,
)
from cloudddp.backends.status import Cause, LogLine, RunState, RunStatus
from cloudddp.backends.torchrun import failed_rank
from cloudddp.code import requirements
from cloudddp.code.snapshot import snapshot_warnings
from cloudddp.errors import CloudDDPError, UserError
from cloudddp.observe.units import human_bytes
from cloudddp.paths import home
from cloudddp.plan import Plan, substitute
from cloudddp.runtime import Places, checked_snapshot, checkpoint_folder, job_env, packed, snapshot_upload
from cloudddp.runtime import program as runtime_program
from cloudddp.spec.model import JobSpec
from cloudddp.spec.secrets import redacted_spec_data

SACCT_FIELDS = "JobID,State,ExitCode,NodeList,Submit,End"
DEFAULT_STATUS_EVERY = 10
"""slurm.status_every for runs recorded before it existed."""
BACKOFF = 1.5
"""While a queued job's answer does not change, each wait is this much longer than the last ..."""
MAX_BACKOFF = 6
"""... up to this many times slurm.status_every."""
TORCHRUN_STOP_SECONDS = 30
"""torchrun gives its workers this long after SIGTERM before it kills them (its agent's shutdown timeout)."""
_PRIVATE = (
    'test -O "$1" || { echo "owned by another user"; exit 1; }; '
    'if [ -n "$(find "$1" -maxdepth 0 -perm /022)" ]; then echo "others may write in it"; exit 1; fi'
)
"""The working folder is the user's and nobody else may write in it."""
_SHA256 = 'sha256sum "$1" 2>/dev/null | cut -d" " -f1'
"""The sha256 of a file on the cluster (nothing when it is missing)."""
_UNPACK = (
    'test -d "$1" && exit 0; got=$(sha256sum "$2" | cut -d" " -f1); '
    'if [ "$got" != "$3" ]; then echo "the code snapshot $2 is not the one uploaded: sha256 $got, expected $3" >&2; '
    "exit 3; fi; "
    'mkdir -p "$1.tmp.$$" && tar --no-same-owner -xzf "$2" -C "$1.tmp.$$" && mv "$1.tmp.$$" "$1"'
)
"""Unpack the snapshot into the run's code folder, once its sha256 is the one the plan names: the archive sits
in a shared working folder under a name anyone on the same commit computes, so its content is checked."""


@dataclasses.dataclass(frozen=True)
class _Seen:
    """The last status Slurm gave for a run, and when it may be asked again."""

    status: RunStatus
    due: float
    wait: float


class SlurmBackend(Backend[SlurmOptions]):
    name: ClassVar[str] = "slurm"
    description: ClassVar[str] = "sbatch on a Slurm cluster (here or through ssh): torchrun per node, c10d rendezvous"
    options_model = SlurmOptions
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
        self._seen: dict[str, _Seen] = {}

    # -- render ------------------------------------------------------------------------------
    def _render(self, spec: JobSpec) -> Plan:
        opts = self.options(spec)
        decisions: list[str] = []
        warnings: list[str] = []
        snapshot = checked_snapshot(spec)
        shell = Shell(opts.login_host, tuple(opts.ssh_options))
        run_id = f"{spec.name}-{self.token or time.strftime('%y%m%d-%H%M%S') + '-' + _random.token_hex(2)}"
        layout = Layout(opts.workdir or str(home() / "slurm"), run_id)
        res = spec.resources
        launch = "srun" if spec.distribution.launcher == "mpi" else opts.launch
        nproc = res.processes
        on_gpu = res.gpus_per_node > 0
        decisions.append(
            f"{res.nodes} node(s) × {nproc} process(es) on {'GPU' if on_gpu else 'CPU'}, "
            + (
                "one torchrun agent per node, c10d rendezvous on the first node's address"
                if launch == "torchrun"
                else "one srun task per process, ranks from SLURM_PROCID"
            )
        )
        decisions.append(f"Slurm's commands run {shell.where}; run folder {layout.run_dir} (a shared filesystem)")
        decisions.append(
            f"code snapshot {snapshot.sha256[:12]} ({len(snapshot.files)} files, "
            f"{human_bytes(snapshot.size)}) kept once in {layout.workdir}/code, unpacked into the "
            "run folder: the job never runs your source tree"
        )
        warnings += snapshot_warnings(snapshot)
        warnings += _hardware_warnings(spec, opts)
        if spec.limits.max_restarts and launch == "srun":
            warnings.append(
                "limits.max_restarts: restarting processes needs torchrun (slurm.launch: torchrun); "
                "with srun a failed process fails the job (slurm.requeue resubmits after node failures)"
            )

        places = Places(
            model_dir=_output_dir(spec, opts, "model", layout.model_dir) or layout.model_dir,
            tensorboard_dir=_output_dir(spec, opts, "tensorboard", f"{layout.run_dir}/tensorboard"),
            checkpoint_dir=_checkpoints(spec, opts, layout),
            inputs={name: _input_path(spec, opts, name) for name in spec.inputs},
        )
        grace = min(opts.kill_wait, TORCHRUN_STOP_SECONDS) if launch == "torchrun" else opts.kill_wait
        env, sources = job_env(spec, self.name, places, on_gpu=on_gpu, sigterm_grace=grace)
        env["CLOUDDDP_RUN_ID"] = run_id
        decisions.append(
            f"SIGTERM grace {grace} s: slurm.kill_wait {opts.kill_wait} s"
            + (
                f", and torchrun stops its workers {TORCHRUN_STOP_SECONDS} s after SIGTERM"
                if launch == "torchrun" and opts.kill_wait > TORCHRUN_STOP_SECONDS
                else ""
            )
        )
        if places.checkpoint_dir:
            decisions.append(f"checkpoints in {places.checkpoint_dir}: a requeued or resubmitted job resumes there")
        per_task = nproc if launch == "torchrun" else 1  # training processes in one Slurm task
        per_process = opts.cpus_per_process or (None if on_gpu else 1)
        holds = f"{per_task} process(es) per Slurm task" if per_task > 1 else "one process per Slurm task"
        if per_process:
            decisions.append(
                f"{per_process} CPU(s) per training process, {holds}: sbatch and srun get "
                f"--cpus-per-task={per_process * per_task}"
            )
        else:
            decisions.append(
                f"CPUs per training process decided at submit: the partition's nodes' CPUs shared among their "
                f"GPUs ({holds}; set slurm.cpus_per_process to choose)"
            )
        minutes = math.ceil(spec.limits.max_runtime / 60)
        budget = None
        if opts.partition_time_limit and opts.partition_time_limit < spec.limits.max_runtime:
            budget, minutes = spec.limits.max_runtime, max(1, opts.partition_time_limit // 60)
            if not opts.requeue:
                raise UserError(
                    f"limits.max_runtime {budget} s is longer than slurm.partition_time_limit "
                    f"{opts.partition_time_limit} s, which needs requeues, and slurm.requeue is off",
                    hint="set slurm.requeue: true, or limits.max_runtime within the partition's limit",
                )
        lead = min(opts.stop_before_limit, minutes * 60 // 2)
        decisions.append(
            f"time limit {minutes} min (Slurm counts minutes); the training is asked to checkpoint and "
            f"stop {lead} s before it"
            + (
                f"; limits.max_runtime ({budget} s) runs as a chain of such allocations, each requeued after "
                "its checkpoint"
                if budget
                else ""
            )
        )
        decisions.append(
            "preempted (with or without a grace time): the training checkpoints on SIGTERM and the job "
            + ("is requeued and resumes" if opts.requeue else "ends (slurm.requeue is off)")
        )
        reqs = requirements.of(spec)
        env_dir, env_key = None, ""
        if reqs is not None:
            if opts.container is not None:
                raise UserError(
                    f"{reqs.source}: with slurm.container the job runs in its image; install the "
                    "requirements in the image",
                    hint="or leave slurm.container out",
                )
            env_key = envs.key(opts.python, opts.modules, opts.setup, reqs.text)
            env_dir = envs.folder(layout.workdir, env_key)
            by = f"at submit {shell.where}" if opts.install_on == "login" else "by the job on its first node"
            decisions.append(
                f"requirements ({len(reqs.lines)} from {reqs.source}): installed {by} into {env_dir} over "
                f"{opts.python}'s packages, once per base (slurm.python, modules, setup) and list; used while "
                "its recorded sha256 matches"
            )
        if opts.container is not None:
            image = images.image_file(opts.container, layout.workdir)
            decisions.append(
                f"container image {opts.container.image}: "
                + (
                    "a file, used as it is"
                    if images.is_file(opts.container)
                    else f"imported once (by the first job that needs it, on its first node) into {image}, "
                    "then run from that file by every node"
                )
            )
        run = runtime_program(spec, places)
        job = Job(
            job_name=spec.name,
            run_id=run_id,
            layout=layout,
            nodes=res.nodes,
            processes_per_node=nproc,
            gpus_per_node=res.gpus_per_node,
            time_minutes=minutes,
            stop_lead=lead,
            max_restarts=spec.limits.max_restarts,
            program=list(run.argv),
            command=not run.python,
            env=env,
            launch=launch,
            env_from_submit=tuple(sources),
            mounts=(layout.workdir, *sorted(set(places.inputs.values()))),
            requirements_env=env_dir,
            keep_files=tuple(spec.checkpoint.files),
            env_key=env_key,
            cpus_per_task=per_process * per_task if per_process else None,
            budget_seconds=budget,
        )
        script = render_script(job, opts)
        request: dict[str, Any] = {
            "run_id": run_id,
            "script_path": layout.script,
            "sbatch": ["sbatch", "--parsable", layout.script],
            "workdir": layout.workdir,
            "run_dir": layout.run_dir,
            "code_dir": layout.code_dir,
            "folders": [
                f"{layout.run_dir}/logs",
                places.model_dir,
                *filter(None, [places.checkpoint_dir, places.tensorboard_dir]),
            ],
            "batch_log": layout.batch_log,
            "node_logs": [layout.node_log(i) for i in range(res.nodes)],
            "nodes": res.nodes,
            "processes_per_node": nproc,
            "launch": launch,
            "kill_wait": opts.kill_wait,
            "env": env,
            "env_from_submit": list(sources),
            "status_every": opts.status_every,
            "environment": (
                {"folder": env_dir, "key": env_key, "python": opts.python, "modules": opts.modules, "setup": opts.setup}
                if env_dir and opts.install_on == "login"
                else None
            ),
            "cpus_at_submit": (
                None
                if per_process
                else {"partition": opts.partition, "gpus_per_node": res.gpus_per_node, "per_task": per_task}
            ),
        }
        return Plan(
            backend=self.name,
            job_name=spec.name,
            request=request,
            documents={"job.sbatch": script},
            decisions=decisions,
            warnings=warnings,
            uploads=[snapshot_upload(spec, snapshot, layout.archive(snapshot.sha256))],
            target=shell.to_dict(),
            job=redacted_spec_data(spec),
            env_sources=sources,
        )

    def _for_attempt(self, plan: Plan, attempt: int) -> Plan:
        """A recovery's next attempt: its own run id (the Slurm job name) and run folder; the same code,
        checkpoints and everything else."""
        old = plan.request["run_id"]
        base = old.removesuffix(f"-r{attempt - 1}") if attempt > 2 else old
        table = {old: f"{base}-r{attempt}"}
        return dataclasses.replace(
            plan, request=substitute(plan.request, table), documents=substitute(plan.documents, table)
        )

    # -- launch ------------------------------------------------------------------------------
    def _launch(self, plan: Plan, *, provision: bool, progress: Progress | None) -> Launched:
        req = plan.request
        shell = Shell.of(plan.target)
        info = {
            **shell.to_dict(),
            "name": plan.job_name,
            **{
                k: req[k]
                for k in ("run_dir", "batch_log", "node_logs", "nodes", "processes_per_node", "launch", "kill_wait")
            },
            "status_every": req.get("status_every", DEFAULT_STATUS_EVERY),
        }
        found = self._find(shell, req["run_id"])
        if found:
            if progress:
                progress.step(f"Slurm job {found} is this plan's run already: not submitted again")
            return Launched(req["run_id"], {**info, "job_id": found})
        for upload in plan.uploads:
            self._upload(shell, upload, progress)
            where = [req["code_dir"], upload["destination"], upload["sha256"]]
            shell.run(["bash", "-c", _UNPACK, "cloudddp-unpack", *where], timeout=600)
        shell.run(["mkdir", "-p", *req["folders"]])
        shell.write(req["script_path"], plan.documents["job.sbatch"].encode())
        if req.get("environment"):
            self._environment(shell, req["environment"], req["code_dir"], progress)
        sbatch = list(req["sbatch"])
        if req.get("cpus_at_submit"):
            sbatch.insert(1, f"--cpus-per-task={self._cpus_per_task(shell, req['cpus_at_submit'], progress)}")
        carried = {name: plan.reveal(req["env"][name]) for name in req["env_from_submit"]}
        if req["launch"] == "torchrun":
            carried[RDZV_ID_VARIABLE] = _random.token_hex(16)  # a rendezvous only the job can name
        job_id = shell.run_with_env(sbatch, carried).split(";")[0].strip()
        if progress:
            progress.step(f"submitted Slurm job {job_id} ({req['run_id']}) {shell.where}")
        return Launched(req["run_id"], {**info, "job_id": job_id})

    def _environment(self, shell: Shell, env: dict[str, Any], code_dir: str, progress: Progress | None) -> None:
        """Build (or check) the requirements environment where Slurm's commands run, before the job needs it."""
        if progress:
            progress.step(f"requirements environment {env['folder']} {shell.where}: checking, building if needed")
        text = envs.login_build(
            env["folder"], env["python"], env["key"], code_dir=code_dir, modules=env["modules"], setup=env["setup"]
        )
        done = shell.run(["bash", "-c", text], timeout=3600, check=False)
        said = [line for line in done.stdout.decode(errors="replace").splitlines() if line.startswith("cloudddp: ")]
        if done.returncode != 0:
            why = [line for line in done.stderr.decode(errors="replace").splitlines() if line.strip()][-4:]
            raise UserError(
                f"the job's requirements could not be installed {shell.where}: " + " / ".join(why or said),
                hint="fix the requirement pip names, or set slurm.install_on: job to install them in the job",
            )
        if progress:
            for line in said:
                progress.step(line.removeprefix("cloudddp: "))

    def _cpus_per_task(self, shell: Shell, wanted: dict[str, Any], progress: Progress | None) -> int:
        """--cpus-per-task when slurm.cpus_per_process is not given: each process gets its GPU's share of the
        CPUs of the partition's smallest GPU node (1 when Slurm shows no such node)."""
        partition = ["-p", wanted["partition"]] if wanted.get("partition") else []
        nodes = shell.run(["sinfo", "-h", "-N", *partition, "-o", "%c %G"], check=False).stdout.decode(errors="replace")
        found = cpus_per_gpu(nodes, int(wanted["gpus_per_node"]))
        if progress:
            progress.step(
                f"{found} CPU(s) per training process: the partition's nodes' CPUs shared among their GPUs "
                "(slurm.cpus_per_process chooses)"
                if found
                else f"1 CPU per training process: sinfo shows no node with {wanted['gpus_per_node']} GPUs to share "
                "its CPUs among (set slurm.cpus_per_process)"
            )
        return (found or 1) * int(wanted["per_task"])

    def _find(self, shell: Shell, run_id: str) -> str | None:
        """The Slurm job named ``run_id`` (pending, running or recently ended), if any."""
        ids = shell.text(["squeue", "-h", "-t", "all", f"--name={run_id}", "-o", "%i"]).split()
        return ids[0] if ids else None

    def _upload(self, shell: Shell, upload: dict[str, Any], progress: Progress | None) -> None:
        """The code snapshot into the working folder, unless it is there already (content-addressed)."""
        destination = upload["destination"]
        there = shell.text(["bash", "-c", _SHA256, "cloudddp-sha256", destination], timeout=600).strip()
        if there == upload["sha256"]:
            if progress:
                progress.step(f"code snapshot {upload['sha256'][:12]} is on the cluster already: nothing to copy")
            return
        if there and progress:  # same name, other bytes: a torn copy, or one planted by someone else
            progress.step(f"{destination} on the cluster is not snapshot {upload['sha256'][:12]}: replacing it")
        if progress:
            progress.step(
                f"copying code snapshot {upload['sha256'][:12]} ({human_bytes(upload['bytes'])}) to {destination}"
            )
        with open(packed(upload), "rb") as archive:
            shell.write(destination, archive)

    def _preflight(self, plan: Plan) -> list[Check]:
        req = plan.request
        shell = Shell.of(plan.target)
        try:
            version = shell.text(["sbatch", "--version"])
        except CloudDDPError as e:
            return [
                Check(
                    "Slurm reachable",
                    False,
                    str(e).splitlines()[0],
                    fix="run on the cluster's login node, or set slurm.login_host",
                )
            ]
        checks = [Check("Slurm reachable", True, f"{version} {shell.where}")]
        config = dict(_config_pairs(shell.text(["scontrol", "show", "config"])))
        kill_wait = int(config.get("KillWait", "30 sec").split()[0])
        checks.append(
            Check(
                "SIGTERM grace",
                kill_wait >= req["kill_wait"],
                f"the cluster's KillWait is {kill_wait} s; slurm.kill_wait says {req['kill_wait']} s",
                fix=f"set slurm.kill_wait: {kill_wait}",
            )
        )
        partition = next(
            (
                line.split("=", 1)[1]
                for line in plan.documents["job.sbatch"].splitlines()
                if line.startswith("#SBATCH --partition=")
            ),
            None,
        )
        which = [partition.split(",")[0]] if partition else []
        known = shell.run(["scontrol", "-o", "show", "partition", *which], check=False)
        if partition:
            checks.append(
                Check(
                    f"partition {partition}",
                    known.returncode == 0,
                    "exists" if known.returncode == 0 else "Slurm does not know it",
                    fix="`sinfo -s` lists the partitions",
                )
            )
        checks += _time_limit_check(plan, known.stdout.decode(errors="replace"), partition)
        writable = shell.run(["bash", "-c", 'mkdir -p -m 700 "$1" && test -w "$1"', "-", req["workdir"]], check=False)
        checks.append(
            Check(
                "working folder writable",
                writable.returncode == 0,
                req["workdir"],
                fix="set slurm.workdir to a folder you can write on the shared filesystem",
            )
        )
        if writable.returncode == 0:
            # Its code snapshots (checked by sha256), unpacked run folders and requirements environments run as
            # you: whoever else may write in it could change them.
            private = shell.run(["bash", "-c", _PRIVATE, "-", req["workdir"]], check=False)
            why = private.stdout.decode(errors="replace").strip() or "others may write in it"
            checks.append(
                Check(
                    "working folder yours alone",
                    private.returncode == 0,
                    req["workdir"] if private.returncode == 0 else f"{req['workdir']}: {why}",
                    fix=f"chmod go-w {req['workdir']} (it must be yours, and only yours to write), or set "
                    "slurm.workdir to a folder of your own",
                )
            )
        for name, value in req["env"].items():
            if name.startswith("CLOUDDDP_INPUT_"):
                there = shell.run(["test", "-e", value], check=False).returncode == 0
                checks.append(
                    Check(
                        f"input {name[15:].lower()} exists",
                        there,
                        value,
                        fix="put the data on the cluster's filesystem and give inputs.<name>.at.slurm",
                    )
                )
        return checks

    # -- run verbs ---------------------------------------------------------------------------
    def _record(self, run_id: str) -> dict[str, Any] | None:
        record = self.registry.get(run_id)
        return record.info if record is not None and record.backend == self.name else None

    def _job(self, shell: Shell, job_id: str) -> dict[str, str] | None:
        """Slurm's record of the job: scontrol while slurmctld remembers it, else accounting (or jobcomp).
        Times come with their zone (:data:`TIME_FORMAT`), so they read right wherever this machine is."""
        zoned = ["env", f"SLURM_TIME_FORMAT={TIME_FORMAT}"]
        shown = shell.run([*zoned, "scontrol", "-o", "show", "job", job_id], check=False)
        lines = shown.stdout.decode(errors="replace").splitlines()
        if shown.returncode == 0 and lines:
            return parse_pairs(lines[0])
        for completion in ([], ["--completion"]):
            listed = shell.run(
                [
                    *zoned,
                    "sacct",
                    *completion,
                    "-j",
                    job_id,
                    "-n",
                    "-P",
                    "-o",
                    "JobID,State,ExitCode,NodeList,Submit,End",
                ],
                check=False,
            )
            rows = [r for r in listed.stdout.decode(errors="replace").splitlines() if r.split("|")[0] == job_id]
            if listed.returncode == 0 and rows:
                return from_sacct(rows[-1])  # a requeued job has a row per run: the last is the latest
        return None

    def _describe(self, run_id: str) -> RunStatus | None:
        """The run's status, asked of Slurm at most once per ``slurm.status_every`` seconds (this backend
        object remembers the last answer); while the job waits in the queue unchanged, the wait grows."""
        info = self._record(run_id)
        if info is None:
            return None
        now = time.monotonic()
        seen = self._seen.get(run_id)
        if seen is not None and (seen.status.state.terminal or now < seen.due):
            return seen.status
        status = self._ask(run_id, info)
        every = max(1.0, float(info.get("status_every", DEFAULT_STATUS_EVERY)))
        same = seen is not None and (seen.status.state, seen.status.message) == (status.state, status.message)
        wait = (
            min(seen.wait * BACKOFF, every * MAX_BACKOFF)
            if same and seen and status.state is RunState.PENDING
            else every
        )
        self._seen[run_id] = _Seen(status, time.monotonic() + wait, wait)
        return status

    def _ask(self, run_id: str, info: dict[str, Any]) -> RunStatus:
        shell = Shell.of(info)
        job = self._job(shell, info["job_id"])
        details: dict[str, Any] = {"job_id": info["job_id"], "run_dir": info["run_dir"]}
        if job is None:
            return RunStatus(
                run_id,
                self.name,
                RunState.UNKNOWN,
                name=info.get("name", run_id),
                details=details,
                message=f"Slurm no longer knows job {info['job_id']} (no accounting record)",
            )
        native = job.get("JobState", "")
        state = STATES.get(native, RunState.UNKNOWN)
        restarts = int(job.get("Restarts", "0") or 0)
        details.update(
            nodes=job.get("NodeList"), exit_code=job.get("ExitCode"), reason=job.get("Reason"), restarts=restarts
        )
        message = native.lower()
        cause: Cause | None = None
        requeues = ""
        if restarts:  # why each earlier run stopped (a preemption, a chain's time limit, a node failure)
            reasons = requeue_reasons(shell.tail(info["batch_log"], 65536))[:restarts]
            details["requeue_reasons"] = reasons
            requeues = _requeues(restarts, reasons)
        if state is RunState.PENDING:
            message = f"waiting in the queue ({job.get('Reason', '?')})"
            on_hold = held(job)
            if on_hold:
                message, details["held"] = on_hold, True
            if restarts:
                why = details["requeue_reasons"][-1] if details["requeue_reasons"] else ""
                message = f"requeued{f' after {why}' if why else ''} (restart {restarts}); " + message
        elif state in (RunState.RUNNING, RunState.STARTING):
            message = f"running on {job.get('NodeList')}" + (f" (restart {restarts}; {requeues})" if restarts else "")
        elif state is RunState.SUCCEEDED:
            message = "finished" + (f" after {requeues}" if restarts else "")
        elif state is RunState.CANCELLED:
            message, cause = "cancelled", Cause.CANCELLED
        elif state is RunState.FAILED:
            found = failure(job, shell.tail(info["batch_log"], 65536), tasks_are_ranks=info["launch"] == "srun")
            failed = details["failure"] = self._failure_details(shell, info, found.node, found.task)
            cause = found.cause
            message = found.message + (
                f"; torchrun: rank {failed['rank']} failed first (exit code {failed.get('exitcode', '?')})"
                if "rank" in failed
                else ""
            )
        return RunStatus(
            run_id=run_id,
            backend=self.name,
            state=state,
            name=info.get("name", run_id),
            native_state=native,
            message=message,
            created_at=timestamp(job.get("SubmitTime")),
            ended_at=timestamp(job.get("EndTime")) if state.terminal else None,
            details=details,
            cause=cause,
        )

    def _failure_details(
        self, shell: Shell, info: dict[str, Any], node: str | None, task: int | None
    ) -> dict[str, Any]:
        """The failed node's log tail (and the rank torchrun names), for ``cloudddp status``."""
        found: dict[str, Any] = {"node": node}
        if task is None:
            return found
        index = task if info["launch"] == "torchrun" else task // max(1, info["processes_per_node"])
        text = shell.tail(info["node_logs"][min(index, len(info["node_logs"]) - 1)], 65536)
        failed = failed_rank(text)
        found.update(task=task, node_index=index, **(dataclasses.asdict(failed) if failed else {}))
        found["log_tail"] = text.splitlines()[-20:]
        return found

    def _finished(self, run_id: str) -> bool:
        return self.status(run_id).state.terminal

    def _log_iter(self, run_id: str, *, follow: bool) -> Iterator[LogLine]:
        info = self._record(run_id)
        if info is None:
            return
        shell = Shell.of(info)
        nodes = int(info["nodes"])
        paths = [info["batch_log"], *info["node_logs"]]
        labels = Labels(nodes, per_task=info["launch"] == "srun", per_node=int(info["processes_per_node"]))
        finished = functools.partial(self._finished, run_id)
        for batch in follow_batches(shell, paths, follow=follow, finished=finished, poll=self.poll_seconds):
            yield from labels.ordered(batch)

    def _cancel(self, run_id: str) -> None:
        info = self._record(run_id)
        if info is None:
            return
        shell = Shell.of(info)
        self._seen.pop(run_id, None)
        shell.run(["scancel", info["job_id"]])  # SIGTERM to every process, SIGKILL KillWait later
        deadline = time.monotonic() + float(info["kill_wait"]) + 15
        while time.monotonic() < deadline:
            job = self._job(shell, info["job_id"])
            if job is None or job.get("JobState") not in LIVE:
                return
            time.sleep(1)  # once a second: the controller answers every user


def _time_limit_check(plan: Plan, partitions: str, named: str | None) -> list[Check]:
    """The script's --time against the partition's MaxTime: a longer one would wait in the queue forever
    (Reason=PartitionTimeLimit), or be refused."""
    rows = [parse_pairs(line) for line in partitions.splitlines() if line.startswith("PartitionName=")]
    row = rows[0] if named else next((r for r in rows if r.get("Default") == "YES"), None)
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


def _requeues(restarts: int, reasons: list[str]) -> str:
    """``2 requeues: preemption, the partition's time limit ×1`` (reasons as the batch log tells them)."""
    counted = Counter(r or "not said" for r in reasons)
    said = ", ".join(f"{why} ×{n}" if n > 1 else why for why, n in counted.items())
    return f"{restarts} requeue{'s' if restarts > 1 else ''}" + (f": {said}" if said else "")


def _config_pairs(text: str) -> Iterator[tuple[str, str]]:
    """``scontrol show config`` lines (``Name = value``)."""
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep:
            yield name.strip(), value.strip()


def _cluster_path(spec: JobSpec, opts: SlurmOptions, where: str, field: str) -> str:
    """A path the job uses: absolute as given; relative to the spec file when this machine is the login node."""
    if "://" in where:
        raise UserError(
            f"{field}: {where} is not on the cluster's filesystem",
            hint="give a path every node can read (a shared filesystem)",
        )
    if where.startswith("/"):
        return where
    if opts.login_host:
        raise UserError(
            f"{field}: {where} is relative, and the cluster is reached through ssh",
            hint="give an absolute path on the cluster's shared filesystem",
        )
    return str((spec.base_dir / where).resolve())


def _input_path(spec: JobSpec, opts: SlurmOptions, name: str) -> str:
    item = spec.inputs[name]
    field = f"inputs.{name}.at.slurm" if "slurm" in item.at else f"inputs.{name}.path"
    return _cluster_path(spec, opts, spec.input_location(name, "slurm"), field)


def _output_dir(spec: JobSpec, opts: SlurmOptions, name: str, default: str) -> str | None:
    """Where output ``name`` goes: its path on the cluster, else ``default`` (None: TensorBoard not declared)."""
    output = spec.outputs.get(name)
    if output is None and name != "model":
        return None
    if output is None or output.path is None:
        return default
    return _cluster_path(spec, opts, output.path, f"outputs.{name}.path")


def _checkpoints(spec: JobSpec, opts: SlurmOptions, layout: Layout) -> str | None:
    if not spec.checkpoint.enabled:
        return None
    folder = checkpoint_folder(spec, f"{layout.workdir}/checkpoints")
    return _cluster_path(spec, opts, folder, "checkpoint.path") if spec.checkpoint.path else folder


def _hardware_warnings(spec: JobSpec, opts: SlurmOptions) -> list[str]:
    """What cloudddp cannot check on a cluster it does not know, said once at render."""
    res = spec.resources
    found = []
    rdma = res.interconnect == "rdma" or (res.interconnect == "auto" and res.nodes > 1 and res.gpus_per_node > 0)
    if rdma and not (opts.constraint or opts.partition):
        if res.interconnect == "rdma":
            raise UserError(
                "resources.interconnect: rdma, but nothing tells Slurm to place the job on InfiniBand nodes",
                hint="set slurm.constraint (e.g. ib) or slurm.partition to where the cluster's InfiniBand nodes are",
            )
        found.append(
            f"{res.nodes} GPU nodes want InfiniBand between them, and cloudddp cannot see this cluster's "
            "fabric: name the nodes that have it (slurm.constraint, e.g. ib, or slurm.partition), or set "
            "resources.interconnect: any"
        )
    if res.accelerator and not (opts.gpu_type or opts.constraint):
        found.append(
            f"resources.accelerator {res.accelerator} is not sent to Slurm: set slurm.gpu_type (the "
            "cluster's GRES type name) or slurm.constraint"
        )
    return found


__all__ = ["SlurmBackend", "SlurmOptions"]
