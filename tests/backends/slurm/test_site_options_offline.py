"""Slurm as real clusters are configured, offline: what the spec refuses and why, sbatch's options read as sbatch
reads them, the requirements environment's shell functions run by a real bash and pip, the clean environment
sbatch gets, Slurm's answers (held jobs, zoned times, node sizes), how often the controller is asked, the shared
script's threads, and the working folder the login shell names. The same on the real cluster:
tests/backends/slurm/test_site_options_on_cluster.py."""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.slurm import SlurmBackend, envs
from cloudddp.backends.slurm import shell as shell_module
from cloudddp.backends.slurm.agent import STORE
from cloudddp.backends.slurm.answers import cpus_per_gpu, held, parse_pairs, timestamp
from cloudddp.backends.slurm.flags import normalize
from cloudddp.backends.slurm.launch import cpus_per_task
from cloudddp.backends.slurm.record import SlurmRunInfo
from cloudddp.backends.slurm.shell import Shell, clean_env
from cloudddp.backends.slurm.workdir import LATE, WORKDIR, bound
from cloudddp.backends.status import RunState, RunStatus
from cloudddp.errors import UserError
from cloudddp.runs.runner import get_backend
from tests.support.cli import FIXTURES, ROOT, cli
from tests.support.wheels import wheel

CIFAR = ROOT / "jobs" / "cifar10-slurm.yaml"
TINY = FIXTURES / "tinyjob" / "job.yaml"


def spec_with(tmp_path: Path, slurm_lines: list[str]) -> tuple[Path, int]:
    """A job spec whose ``slurm:`` section is ``slurm_lines``; the line number of the first of them."""
    head = [f"name: hyg\ncode: {{dir: {FIXTURES / 'tinyjob'}, entry: train.py}}", "slurm:"]
    path = tmp_path / "job.yaml"
    path.write_text("\n".join([*head, *(f"  {line}" for line in slurm_lines)]) + "\n")
    return path, len("\n".join(head).splitlines()) + 1


@pytest.mark.parametrize(
    "line, words",
    [
        ("sbatch_options: [-J, other]", ["--job-name is set by cloudddp", "retried submit finds it"]),
        ("sbatch_options: [-t 5]", ["--time is set by cloudddp", "limits.max_runtime"]),
        ("sbatch_options: ['-t5']", ["--time is set by cloudddp"]),
        ("sbatch_options: [--job=x]", ["--job-name is set by cloudddp"]),  # getopt_long takes a prefix
        ("sbatch_options: [-c, '4']", ["--cpus-per-task is set by cloudddp", "slurm.cpus_per_process"]),
        ("sbatch_options: [--reservaton=ml]", ["no option --reservaton", "did you mean --reservation"]),
        ("sbatch_options: [--ntasks-per]", ["ambiguous", "--ntasks-per-node", "--ntasks-per-core"]),
        ("sbatch_options: [--mail-type]", ["--mail-type needs a value"]),
        ("sbatch_options: ['--comment=two words']", ["must be one word"]),
        ("sbatch_options: [-Z]", ["sbatch has no option -Z"]),
        ("sbatch_options: [reservation=ml]", ["as on sbatch's command line"]),
        ("workdir: /shared/my folder", ["' '", "cannot carry it"]),
        ("workdir: /shared/100%", ["'%'", "file-name pattern"]),
        ('workdir: "/shared/it\'s"', ['"\'"']),
        ("workdir: shared", ["absolute path"]),
        ("workdir: /shared/a,b", ["','", "container mounts cannot"]),
        ("workdir: /shared/a:b", ["':'", "a mount's parts"]),
        ("sbatch_options: [--array=0-2]", ["--array is not supported", "one run per index"]),
        ("sbatch_options: [--container-image, img]", ["--container-image=img as one item"]),
        ("stop_before_limit: 70000", ["65535"]),
        ("status_every: 0", ["between 1 s"]),
        ("install_on: compute", ["login", "job"]),
    ],
)
def test_bad_slurm_input_exits_2_naming_the_field_the_line_and_what_to_do(
    tmp_path: Path, line: str, words: list[str]
) -> None:
    spec, at = spec_with(tmp_path, [line])
    result = cli("render", str(spec), "-b", "slurm")
    said = " ".join(result.stderr.split())
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{spec}:{at}" in said and "slurm" in said and "Traceback" not in said, said
    for word in words:
        assert word in said, (word, said)


def test_sbatch_options_are_read_as_sbatch_reads_them_and_rendered_in_one_form(tmp_path: Path) -> None:
    assert normalize(["-w", "node1", "-H", "--mail-type", "END,FAIL", "--reser=ml", "-xnode2", "--nice"]) == [
        "--nodelist=node1",
        "--hold",
        "--mail-type=END,FAIL",
        "--reservation=ml",
        "--exclude=node2",
        "--nice",
    ]
    spec, _ = spec_with(tmp_path, ["sbatch_options: [-w, node1, --mail-type, END]"])
    backend = get_backend("slurm", token="t1")
    script = backend.render(Job.load(spec).spec).documents["job.sbatch"]
    assert "#SBATCH --nodelist=node1\n#SBATCH --mail-type=END\n" in script
    other, _ = spec_with(tmp_path, ["sbatch_options: [-M, gpu]"])  # every later command names it (-M)
    plan = backend.render(Job.load(other).spec)
    assert "#SBATCH --clusters=gpu\n" in plan.documents["job.sbatch"] and plan.request.clusters == "gpu"


def test_the_srun_launch_derives_no_port_and_its_ranks_join_only_the_published_store() -> None:
    """Under slurm.launch: srun no port comes from the job id (another user could bind it in advance): rank 0's
    task starts the store wrapper on port 0 and every rank joins the published address as a client."""
    plan = get_backend("slurm", token="t1").render(Job.load(TINY, ["resources.nodes=2", "slurm.launch=srun"]).spec)
    script = plan.documents["job.sbatch"]
    assert "rdzv_port" not in script and "SLURM_JOB_ID *" not in script and "15000" not in script
    assert f"rdzv_wrapper={shlex.quote(STORE)}" in script
    assert '"$rdzv_file" "$rdzv_host" 0 serve $$)' in script and '"$rdzv_file" "" 0 read) || exit $?' in script
    assert "MASTER_PORT=${endpoint##*:} TORCHELASTIC_USE_AGENT_STORE=True" in script


def test_cpus_per_process_mean_the_same_on_either_launch() -> None:
    def cpus(*overrides: str) -> tuple[list[str], str]:
        plan = get_backend("slurm", token="t1").render(Job.load(CIFAR, list(overrides)).spec)
        script = plan.documents["job.sbatch"].replace(" \\\n  ", " ")
        sbatch = [x for x in script.splitlines() if x.startswith("#SBATCH --cpus-per-task")]
        srun = next(x for x in script.splitlines() if x.startswith("srun "))
        return sbatch, srun

    # 8 processes per node x 8 CPUs: one torchrun task holds them all; one srun task per process holds one.
    assert cpus() == (["#SBATCH --cpus-per-task=64"], cpus()[1]) and "--cpus-per-task=64" in cpus()[1]
    sbatch, srun = cpus("slurm.launch=srun")
    assert sbatch == ["#SBATCH --cpus-per-task=8"] and "--cpus-per-task=8" in srun
    sbatch, srun = cpus("slurm.cpus_per_process=null")  # decided at submit from the nodes
    assert sbatch == [] and '"--cpus-per-task=$SLURM_CPUS_PER_TASK"' in srun
    tiny = get_backend("slurm", token="t1").render(Job.load(TINY, ["resources.processes_per_node=2"]).spec)
    assert "#SBATCH --cpus-per-task=2" in tiny.documents["job.sbatch"]  # CPU training: 1 per process by default
    assert tiny.request.cpus_at_submit is None


def test_a_gpus_share_of_a_nodes_cpus_comes_from_sinfo() -> None:
    sinfo = "64 gpu:a100:8(S:0-1)\n128 gpu:a100:8,tmpdisk:100\n32 (null)\n48 gpu:4\n"
    assert cpus_per_gpu(sinfo, 8) == 8  # the smallest node that has 8 GPUs: 64 / 8
    assert cpus_per_gpu(sinfo, 4) == 8 and cpus_per_gpu("48 gpu:4\n", 2) == 12
    assert cpus_per_gpu("2 (null)\n", 1) is None


def test_a_gpu_jobs_cpus_are_decided_at_submit_from_the_partitions_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """sinfo stubbed (the test cluster has no GPUs): what sbatch gets, and the fallback when Slurm shows none."""
    asked: list[list[str]] = []
    answer = [b"64 gpu:a100:8(S:0-1)\n128 gpu:a100:8\n"]

    def sinfo(self: Shell, argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
        asked.append(list(argv))
        return subprocess.CompletedProcess(argv, 0, answer[0], b"")

    monkeypatch.setattr(Shell, "run", sinfo)
    plan = get_backend("slurm", token="t1").render(Job.load(CIFAR, ["slurm.cpus_per_process=null"]).spec)
    wanted = plan.request.cpus_at_submit
    assert wanted is not None and wanted.to_dict() == {"partition": "gpu", "gpus_per_node": 8, "per_task": 8}
    assert cpus_per_task(Shell(), wanted, None) == 64  # 8 per process x the 8 a torchrun task holds
    assert asked == [["sinfo", "-h", "-N", "-p", "gpu", "-o", "%c %G"]]
    answer[0] = b"32 (null)\n"
    assert cpus_per_task(Shell(), dataclasses.replace(wanted, per_task=1), None) == 1


def test_held_jobs_say_so_with_the_reason_and_how_to_release_them() -> None:
    launch = parse_pairs("JobId=7 JobState=PENDING Reason=launch_failed_requeued_held Priority=0")
    launch["Reason"] = "launch failed requeued held"  # scontrol -o prints it with spaces
    said = held(launch) or ""
    assert said.startswith("held (launch failed requeued held): Slurm could not start its batch script")
    assert said.endswith("`scontrol release 7`")
    assert "its user held it" in (held({"JobId": "8", "JobState": "PENDING", "Reason": "JobHeldUser"}) or "")
    assert held({"JobId": "9", "JobState": "REQUEUE_HOLD", "Reason": "None"})
    assert held({"JobId": "9", "JobState": "PENDING", "Reason": "Priority"}) is None


def test_slurm_times_are_read_with_their_zone() -> None:
    utc = datetime.datetime(2026, 11, 25, 6, 15, tzinfo=datetime.timezone.utc).timestamp()
    assert timestamp("2026-11-25T12:00:00+0545") == timestamp("2026-11-25T06:15:00+0000") == utc
    assert timestamp("Unknown") is None and timestamp(None) is None


def test_an_outer_jobs_variables_never_reach_sbatch_but_the_cluster_does(monkeypatch: pytest.MonkeyPatch) -> None:
    outer = {
        "SLURM_MEM_PER_CPU": "100",
        "SLURM_JOB_ID": "41",
        "SBATCH_TIMELIMIT": "5",
        "SRUN_CPUS_PER_TASK": "3",
        "SALLOC_PARTITION": "x",
        "SLURM_CONF": "/etc/slurm/other.conf",
    }
    for name, value in outer.items():
        monkeypatch.setenv(name, value)
    assert {k: v for k, v in clean_env(os.environ).items() if k.startswith("S")} == {
        k: v
        for k, v in os.environ.items()
        if k.startswith("S") and not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))
    } | {"SLURM_CONF": "/etc/slurm/other.conf"}
    probe = "import json, os; print(json.dumps(sorted(k for k in os.environ if k.startswith('S'))))"
    seen = json.loads(Shell().run_with_env([sys.executable, "-c", probe], {"SLURM_EXTRA": "carried"}))
    assert {k for k in seen if k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))} == {"SLURM_CONF", "SLURM_EXTRA"}
    # The wrapper sbatch runs in removes them itself too: on a login host they come from its shell, not from here.
    dirty = {**os.environ, **outer}
    direct = subprocess.run(
        ["bash", "-c", shell_module._WITH_ENV, "cloudddp-env", sys.executable, "-c", probe],
        input=b"SLURM_EXTRA=carried\0",
        capture_output=True,
        env=dirty,
        check=True,
    )
    assert [k for k in json.loads(direct.stdout) if k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))] == [
        "SLURM_CONF",
        "SLURM_EXTRA",
    ]


def run_env(
    tmp: Path, mode: str, python: str = sys.executable, key: str = "k" * 64
) -> subprocess.CompletedProcess[str]:
    text = envs.FUNCTIONS + envs.call(str(tmp / "envs" / "e"), python, key, mode)
    return subprocess.run(["bash", "-c", text], capture_output=True, text=True, cwd=tmp / "code", timeout=300)


def test_the_requirements_environment_is_built_once_checked_by_its_sha256_and_rebuilt_when_changed(
    tmp_path: Path,
) -> None:
    """The shell functions the job and the login node run: a real bash, venv and pip (a local wheel)."""
    (tmp_path / "code" / "wheels").mkdir(parents=True)
    wheel(tmp_path / "code" / "wheels")
    (tmp_path / "code" / "requirements.txt").write_text("--no-index\n./wheels/rehearsal_dep-1.0-py3-none-any.whl\n")
    missing = run_env(tmp_path, "check")
    assert missing.returncode == 1 and "it is not built yet" in missing.stderr, missing.stderr
    built = run_env(tmp_path, "build")
    assert built.returncode == 0 and "environment" in built.stdout and "built" in built.stdout, built.stderr
    env = tmp_path / "envs" / "e"
    assert env.is_symlink() and (env / envs.RECORD).read_text().startswith(f"key={'k' * 64} base=")
    python = env / "bin" / "python"
    imported = subprocess.run(
        [str(python), "-c", "import rehearsal_dep; print(rehearsal_dep.VALUE)"], text=True, capture_output=True
    )
    assert imported.stdout.strip() == "from requirements.txt", imported.stderr
    again = run_env(tmp_path, "check")
    assert again.returncode == 0 and "ready (sha256 checked)" in again.stdout, again.stderr
    module = next(env.rglob("rehearsal_dep.py"))
    module.write_text("import os; os.system('touch planted')\n")  # changed after it was built
    refused = run_env(tmp_path, "check")
    assert refused.returncode == 1 and "its files changed since it was built (sha256)" in refused.stderr
    rebuilt = run_env(tmp_path, "build")
    assert rebuilt.returncode == 0 and "files changed" in rebuilt.stdout, rebuilt.stdout + rebuilt.stderr
    assert "planted" not in next(env.rglob("rehearsal_dep.py")).read_text()
    other_base = run_env(tmp_path, "check", python="/usr/bin/python3")
    if os.path.realpath("/usr/bin/python3") != os.path.realpath(sys.executable):
        assert other_base.returncode == 1 and "another base Python" in other_base.stderr, other_base.stderr
    other_key = run_env(tmp_path, "check", key="0" * 64)
    assert other_key.returncode == 1 and "built for another base Python or requirements list" in other_key.stderr


class _Asked(SlurmBackend):
    """The backend with Slurm's answer stubbed: how often it asks is what is tested."""

    def __init__(self, states: list[RunState]) -> None:
        super().__init__()
        self.states, self.asked = states, 0

    def _record(self, run_id: str) -> SlurmRunInfo:
        return SlurmRunInfo(
            name="r",
            run_dir="",
            batch_log="",
            node_logs=(),
            nodes=1,
            processes_per_node=1,
            launch="torchrun",
            kill_wait=30,
            status_every=4,
            job_id="1",
        )

    def _ask(self, run_id: str, info: SlurmRunInfo) -> RunStatus:
        self.asked += 1
        state = self.states[min(self.asked - 1, len(self.states) - 1)]
        return RunStatus(run_id, "slurm", state, message=state.value)


def test_the_controller_is_asked_at_most_once_per_interval_and_less_while_a_job_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr("cloudddp.backends.slurm.status.time.monotonic", lambda: clock[0])
    backend = _Asked([RunState.PENDING] * 6 + [RunState.RUNNING] * 3 + [RunState.SUCCEEDED])
    asked_at = []
    for _ in range(400):  # a follower asking every 0.5 s for 200 s
        before = backend.asked
        backend.status("r")
        if backend.asked != before:
            asked_at.append(clock[0] - 1000)
        clock[0] += 0.5
    gaps = [b - a for a, b in itertools.pairwise(asked_at)]
    assert all(g >= 4 for g in gaps), gaps
    # queued and unchanged: 4, 6, 9, 13.5, 20.25 (x1.5, at most 6 x 4 = 24 s); running: every 4 s
    assert gaps[:5] == [4.0, 6.0, 9.0, 13.5, 20.5], gaps
    assert backend.status("r").state is RunState.SUCCEEDED and backend.asked == 10  # ended: not asked again


def test_threads_follow_the_processes_affinity_and_slurms_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    sys.path.insert(0, str(ROOT / "src_train"))
    try:
        from ddptrain.distributed import cpu_threads  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(ROOT / "src_train"))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    for name in ("SLURM_STEP_NUM_TASKS", "SLURM_STEP_NUM_NODES", "SLURM_CPUS_PER_TASK"):
        monkeypatch.delenv(name, raising=False)
    assert cpu_threads(4) == 4  # a local run: 4 processes share this process's 16 CPUs
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "2")
    monkeypatch.setenv("SLURM_STEP_NUM_NODES", "2")
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "8")
    assert cpu_threads(4) == 2  # torchrun: one task of 8 CPUs per node holds 4 processes
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "8")
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "2")
    assert cpu_threads(4) == 2  # srun: each process is a task of 2 CPUs (affinity unbound: 16)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert cpu_threads(4) == 1  # bound to one core


@pytest.mark.parametrize(
    "environ, workdir",
    [
        ({"SCRATCH": "/scratch/u1/"}, "/scratch/u1/cloudddp"),
        ({"WORK": "/work/u1"}, "/work/u1/cloudddp"),
        ({"SCRATCH": "/scratch/u1", "CLOUDDDP_SLURM_WORKDIR": "/lustre/site/u1"}, "/lustre/site/u1"),
    ],
)
def test_without_workdir_the_run_goes_where_the_login_shell_says_at_submit(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], workdir: str
) -> None:
    """A site's scratch space (read through the shell Slurm's commands run in, here a real bash -l), not $HOME;
    without any, $CLOUDDDP_HOME/slurm. Render names the folder by a placeholder; binding it fills every path the
    plan sends."""
    for name in ("SCRATCH", "WORK", "CLOUDDDP_SLURM_WORKDIR"):
        monkeypatch.delenv(name, raising=False)
    plan = Job.load(TINY).render("slurm")
    assert plan.late == (LATE,) and plan.request.workdir == WORKDIR, plan.request
    assert bound(plan).request.workdir == str(Path(os.environ["CLOUDDDP_HOME"]) / "slurm")
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    filled = bound(plan)
    sent = json.dumps([filled.request.to_dict(), filled.documents, filled.uploads, filled.target.to_dict()])
    assert filled.late == () and WORKDIR not in sent, sent
    assert filled.request.workdir == workdir and f"--output={workdir}/runs/tiny-" in filled.documents["job.sbatch"]
    checkpoints = filled.request.checkpoint_dir
    assert checkpoints and checkpoints.startswith(f"{workdir}/checkpoints/tiny/"), checkpoints
    assert filled.target.checkpoints == filled.request.env["CLOUDDDP_CHECKPOINT_DIR"] == checkpoints
    assert filled.uploads[0]["destination"].startswith(f"{workdir}/code/")
    assert SlurmBackend().checkpoint_store(plan.target).location == checkpoints  # the run record's target, unbound
    assert filled.request.script_path == f"{filled.request.run_dir}/job.sbatch"


def test_a_scratch_folder_that_cannot_hold_runs_stops_the_submit_naming_the_variable_and_the_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SCRATCH", "/scratch/my data")
    plan = Job.load(TINY).render("slurm")  # render asks nothing
    with pytest.raises(UserError) as info:
        get_backend("slurm").launch(plan, checks=False)
    said = str(info.value)
    assert "slurm.workdir: not given, and $SCRATCH on the cluster (/scratch/my data)" in said, said
    assert "set slurm.workdir" in said
