"""The Slurm backend offline: the sbatch script a spec renders to (checked by bash itself), what is refused
and warned about, and the pieces that talk to a cluster (the ssh wrapping, secrets on stdin, reading files by
offset, Slurm's answers) against a real shell. The cluster itself: tests/backends/slurm/test_runs.py."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.slurm import SlurmBackend
from cloudddp.backends.slurm import launch as slurm_launch
from cloudddp.backends.slurm.agent import AGENT, PORT_TAKEN_EXIT, PORT_TAKEN_MARK
from cloudddp.backends.slurm.answers import (
    STATES,
    failure,
    from_ended,
    from_sacct,
    parse_pairs,
    requeue_reasons,
    timestamp,
)
from cloudddp.backends.slurm.logs import Labels
from cloudddp.backends.slurm.script import ENDED_FILE, LIMIT_EXIT, LIMIT_MARK, PREEMPT_MARK
from cloudddp.backends.slurm.shell import READ_CAP, Shell
from cloudddp.backends.slurm.workdir import LATE, WORKDIR
from cloudddp.backends.status import Cause
from cloudddp.errors import UserError
from cloudddp.plan import Plan
from cloudddp.runs.runner import get_backend
from tests.support.cli import FIXTURES, ROOT, cli
from tests.support.slurm_cluster import TERMINAL

CIFAR = ROOT / "jobs" / "cifar10-slurm.yaml"
TINY = FIXTURES / "tinyjob" / "job.yaml"


def render(spec: Path, *overrides: str) -> Plan:
    backend = get_backend("slurm", token="t1")
    assert isinstance(backend, SlurmBackend)
    return backend.render(Job.load(spec, list(overrides)).spec)


def sbatch_lines(plan: Plan) -> list[str]:
    return [
        line.removeprefix("#SBATCH ")
        for line in plan.documents["job.sbatch"].splitlines()
        if line.startswith("#SBATCH ")
    ]


def flat(script: str) -> str:
    """The script with its continued lines joined (long srun lines are wrapped for reading)."""
    return script.replace(" \\\n  ", " ")


def bash_accepts(script: str) -> None:
    checked = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


def test_the_example_job_renders_offline_to_the_sbatch_script_it_describes() -> None:
    result = cli("render", str(CIFAR), "-b", "slurm", "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    script = flat(plan["documents"]["job.sbatch"])
    run_id = plan["request"]["run_id"]
    run_dir = f"/shared/home/me/cloudddp/runs/{run_id}"
    assert [line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH")] == [
        f"--job-name={run_id}",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--cpus-per-task=64",
        "--gpus-per-node=a100:8",
        "--mem=0",
        "--time=0-08:00:00",
        "--signal=B:USR1@180",
        "--requeue",
        "--partition=gpu",
        "--account=ml-research",
        "--qos=normal",
        "--constraint=ib",
        "--exclusive",
        f"--output={run_dir}/batch.log",
        "--open-mode=append",
        f"--chdir={run_dir}/code",
        "--export=ALL",
    ]
    assert "module load cuda/12.4\nsource /shared/home/me/venvs/torch/bin/activate\n" in script
    assert "export CLOUDDDP_INPUT_CIFAR=/shared/datasets/cifar-10-batches-py" in script
    assert "export CLOUDDDP_DIST_BACKEND=nccl" in script and f"export CLOUDDDP_RUN_ID={run_id}" in script
    assert "--nproc-per-node=8" in script and "--max-restarts=2" in script and "--rdzv-backend=c10d" in script
    assert "train.py --dataset cifar10 --model resnet18" in script
    assert "--data-dir /shared/datasets/cifar-10-batches-py" in script
    assert plan["warnings"] == [] and plan["late_bound"] == []
    assert plan["target"]["login_host"] == "login.cluster.example.org" and plan["target"]["ssh_options"] == []
    assert plan["target"]["checkpoints"].startswith("/shared/")
    upload = plan["uploads"][0]
    assert upload["destination"] == f"/shared/home/me/cloudddp/code/{upload['sha256']}.tar.gz"
    bash_accepts(script)


@pytest.mark.parametrize(
    "overrides, present, absent",
    [
        (["slurm.gpu_option=gres"], ["--gres=gpu:a100:8"], ["--gpus-per-node"]),
        (
            ["slurm.launch=srun", "slurm.cpus_per_process=null"],
            ["--ntasks-per-node=8", "--label", 'exec "$@"', '"--cpus-per-task=$SLURM_CPUS_PER_TASK"'],
            ["#SBATCH --cpus-per-task", "torch.distributed.run"],
        ),
        (["distribution.launcher=mpi"], ["--ntasks-per-node=8", "--label"], ["torch.distributed.run"]),
        (
            ["slurm.container={image: 'nvcr.io#nvidia/pytorch:24.05-py3'}"],
            [
                "enroot import --output \"$part\" 'docker://nvcr.io#nvidia/pytorch:24.05-py3'",
                "--container-image=/shared/home/me/cloudddp/images/pytorch_24.05-py3-",
                "--container-mounts=/shared/home/me/cloudddp,/shared/datasets/cifar-10-batches-py",
            ],
            ["apptainer"],
        ),
        (
            ["slurm.container={image: /shared/torch.sif, runtime: apptainer, mounts: [/scratch]}"],
            ["apptainer exec --nv --bind=/shared/home/me/cloudddp,/shared/datasets/cifar-10-batches-py,/scratch"],
            ["--container-image", "apptainer pull"],
        ),
        (
            ["slurm.requeue=false", "slurm.rendezvous_port=29400", "slurm.sbatch_options=[--reservation=ml]"],
            ["--no-requeue", '"$rdzv_file" "$rdzv" 29400 --nnodes', "#SBATCH --reservation=ml"],
            ["#SBATCH --requeue"],
        ),
        (["limits.max_runtime=90"], ["--time=0-00:02:00", "--signal=B:USR1@60"], []),
    ],
)
def test_options_render_to_what_slurm_reads(overrides: list[str], present: list[str], absent: list[str]) -> None:
    script = flat(render(CIFAR, *overrides).documents["job.sbatch"])
    for text in present:
        assert text in script, (text, script)
    for text in absent:
        assert text not in script, (text, script)
    bash_accepts(script)


def test_the_mpi_launcher_says_what_it_becomes_and_restarts_need_torchrun() -> None:
    plan = render(CIFAR, "distribution.launcher=mpi")
    assert any(
        w.startswith("mpi launcher: on Slurm, distribution.launcher: mpi starts one srun task") for w in plan.warnings
    )
    assert any(w.startswith("limits.max_restarts: restarting processes needs torchrun") for w in plan.warnings)


def test_secrets_stay_out_of_the_script_and_the_plan(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"name: s\ncode: {{dir: {FIXTURES / 'tinyjob'}}}\n"
        "env: {PLAIN: shown, TOKEN: {value: hunter2-hunter2, secret: true}, HOME_COPY: {from_env: HOME}}\n"
    )
    plan = render(spec, "slurm.workdir=/shared/w")
    script = plan.documents["job.sbatch"]
    assert "export PLAIN=shown" in script and "hunter2" not in plan.to_json() + script
    assert "# TOKEN: from the submitting shell or a secret" in script and "export TOKEN" not in script
    assert "export HOME_COPY" not in script and plan.request.env_from_submit == ("TOKEN", "HOME_COPY")
    assert plan.reveal(plan.request.env["TOKEN"]) == "hunter2-hunter2"


@pytest.mark.parametrize(
    "overrides, field, words",
    [
        (
            ["resources.interconnect=rdma", "slurm.constraint=null", "slurm.partition=null"],
            "slurm.constraint",
            "InfiniBand",
        ),
        (["slurm.sbatch_options=[--time=5]"], "slurm.sbatch_options", "set by cloudddp"),
        (["slurm.mem=lots"], "slurm.mem", "64G"),
        (["slurm.partition=gpu a100"], "slurm.partition", "one word"),
        (['slurm.partition="gpu\\n"'], "slurm.partition", "one word"),  # a final newline would end the #SBATCH line
        (["inputs.cifar.at.slurm=s3://bucket/cifar/"], "remote inputs", "inputs.<name>.at.slurm"),
        (["inputs.cifar.at.slurm=data/cifar"], "inputs.cifar.at.slurm", "relative"),
        (["checkpoint.path=s3://bucket/ckpt"], "checkpoint.path", "filesystem"),
    ],
)
def test_bad_slurm_input_exits_2_naming_the_field(overrides: list[str], field: str, words: str) -> None:
    result = cli("render", str(CIFAR), "-b", "slurm", *(x for o in overrides for x in ("-o", o)))
    assert result.returncode == 2, result.stdout + result.stderr
    assert field in result.stderr and words in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_without_workdir_render_asks_nothing_and_submit_asks_the_login_shell_before_anything_is_sent() -> None:
    plan = render(CIFAR, "slurm.workdir=null")  # through ssh, to a login host that does not exist
    assert plan.late == (LATE,) and plan.request.workdir == WORKDIR
    assert plan.uploads[0]["destination"].startswith(f"{WORKDIR}/code/")
    assert any("the working folder from the cluster's login shell, resolved at submit" in d for d in plan.decisions)
    with pytest.raises(UserError) as info:
        get_backend("slurm").launch(plan, checks=False)
    assert "slurm.workdir: not given, and the cluster's login shell could not be asked" in str(info.value)
    assert "on login.cluster.example.org (ssh)" in str(info.value)


def test_what_cloudddp_cannot_see_on_a_cluster_is_a_warning_with_the_option_to_set() -> None:
    plan = render(CIFAR, "slurm.constraint=null", "slurm.partition=null", "slurm.gpu_type=null")
    assert any("InfiniBand" in w and "slurm.constraint" in w for w in plan.warnings), plan.warnings
    assert any(w.startswith("resources.accelerator A100 is not sent to Slurm") for w in plan.warnings)
    cpu = render(TINY, "resources.nodes=2")  # gloo over TCP: no fabric to ask for
    assert cpu.warnings == []


# -- talking to a cluster, with a real shell --------------------------------------------------------------
AWKWARD = ["echo", "a b", "it's", '"q"', "$HOME", "`id`", "x;y", "", "line\nbreak", "*"]


def test_over_ssh_every_argument_reaches_the_login_host_unchanged() -> None:
    shell = Shell("me@login", ("-p", "2222"))
    wrapped = shell.argv(["printf", "[%s]\\n", *AWKWARD])
    # The user's options first (ssh takes the first value of each), then the shared connection's.
    assert wrapped[:11] == [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-p",
        "2222",
        "-o",
        "ControlMaster=no",
        "-o",
        f"ControlPath={shell.control_path}",
        "me@login",
        "--",
    ]
    folder = Path(shell.control_path).parent
    assert folder.is_dir() and folder.stat().st_uid == os.getuid() and folder.stat().st_mode & 0o077 == 0
    # What ssh hands the remote login shell is one string; a POSIX shell splits it back into the argv.
    remote = subprocess.run(["sh", "-c", wrapped[11]], capture_output=True, text=True, check=True).stdout
    here = Shell().run(["printf", "[%s]\\n", *AWKWARD]).stdout.decode()
    assert remote == here == "".join(f"[{a}]\n" for a in AWKWARD)


def test_values_sent_on_stdin_reach_the_command_environment_and_no_argv() -> None:
    value = "s3cr3t 'x' \"y\"\nsecond line"
    probe = "import json, os, sys; print(json.dumps([os.environ['TOKEN'], os.environ['OTHER'], sys.argv]))"
    out = Shell().run_with_env(["python3", "-c", probe], {"TOKEN": value, "OTHER": "="})
    token, other, argv = json.loads(out)
    assert (token, other) == (value, "=") and value not in " ".join(argv)


def test_files_are_read_by_offset_in_one_command(tmp_path: Path) -> None:
    log, missing, big = tmp_path / "a.log", tmp_path / "none.log", tmp_path / "big.log"
    log.write_bytes(b"one\ntwo\n")
    big.write_bytes(b"x" * (READ_CAP + 10))
    shell = Shell()
    assert shell.read_from([(str(log), 0), (str(missing), 0), (str(big), 0)]) == [b"one\ntwo\n", None, b"x" * READ_CAP]
    assert shell.read_from([(str(log), 4), (str(big), READ_CAP)]) == [b"two\n", b"x" * 10]
    shell.write(str(tmp_path / "sub" / "f.txt"), b"written")
    assert (tmp_path / "sub" / "f.txt").read_bytes() == b"written" and shell.tail(str(log), 4) == "two"


def test_a_missing_slurm_here_is_a_user_error_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    from cloudddp.errors import BackendUnavailable

    with pytest.raises(BackendUnavailable, match="sbatch is not installed on this machine") as info:
        Shell().run(["sbatch", "--version"])
    assert "slurm.login_host" in str(info.value)


# -- Slurm's answers, as SLURM.md shows them -------------------------------------------------------------
def test_every_state_slurm_ends_a_job_in_maps_to_a_terminal_run_state() -> None:
    assert all(STATES[state].terminal for state in TERMINAL)
    assert not any(STATES[s].terminal for s in ("PENDING", "RUNNING", "COMPLETING", "REQUEUED", "SUSPENDED"))


def test_a_failed_run_is_explained_from_the_batch_log_of_its_latest_run() -> None:
    job = parse_pairs("JobId=5 JobState=FAILED Reason=NonZeroExitCode ExitCode=5:0 NodeList=node[1-2]")
    log = (
        "cloudddp: run 0 of Slurm job 5 on node[1-2]\nsrun: error: node1: task 0: Exited with exit code 9\n"
        "cloudddp: run 1 of Slurm job 5 on node[1-2]\nsrun: error: node2: task 1: Exited with exit code 5\n"
    )
    found = failure(job, log)
    assert (found.message, found.node, found.task, found.cause) == (
        "node node2 (task 1) failed: exited with exit code 5",
        "node2",
        1,
        Cause.USER_ERROR,
    )
    assert failure(job, log, tasks_are_ranks=True).message.startswith("node node2 (rank 1) failed")
    lost = failure({"JobState": "NODE_FAIL", "Reason": "NodeDown"}, "srun: error: Node failure on node2\n")
    assert lost.message.startswith("node node2 failed: Slurm lost it mid-run") and lost.node == "node2"
    assert lost.cause is Cause.INFRASTRUCTURE
    limit = failure({"JobState": "FAILED", "ExitCode": f"{LIMIT_EXIT}:0"}, f"cloudddp: run 0\n{LIMIT_MARK} 180 s")
    assert limit.message.startswith("stopped ahead of limits.max_runtime") and limit.cause is Cause.LIMIT
    timeout = failure({"JobState": "TIMEOUT"}, "")
    assert (timeout.message, timeout.cause) == ("Slurm's time limit (limits.max_runtime) ended it", Cause.LIMIT)
    assert failure({"JobState": "PREEMPTED"}, "").cause is Cause.PREEMPTED
    killed = failure({"JobState": "FAILED", "ExitCode": "0:9"}, "")
    assert killed.message.startswith("the job failed: killed by signal 9")
    exit_98 = f"cloudddp: run 0\nsrun: error: node1: task 0: Exited with exit code {PORT_TAKEN_EXIT}\n"
    taken = f"{exit_98}{PORT_TAKEN_MARK} 29411 (slurm.rendezvous_port) was taken on node1: nothing joined it\n"
    for tasks_are_ranks in (False, True):
        port = failure(job, taken, tasks_are_ranks=tasks_are_ranks)
        assert port.message.startswith("slurm.rendezvous_port is taken on node node1") and port.node == "node1"
        assert port.cause is Cause.INFRASTRUCTURE  # recovery may retry it: the site's port, not the user's code
    assert failure(job, exit_98, tasks_are_ranks=True).cause is Cause.USER_ERROR  # a rank's own exit code 98


def test_why_a_job_was_requeued_and_accounting_rows() -> None:
    log = (
        "cloudddp: run 0 of Slurm job 8\nslurmstepd-node1: error: *** JOB 8 ON node1 CANCELLED AT "
        "2026-11-23T08:45:05 DUE TO JOB REQUEUE ***\ncloudddp: run 1 of Slurm job 8\n"
    )
    assert requeue_reasons(log) == ["job requeue"]
    assert requeue_reasons(log + "srun: error: Node failure on node2\n") == ["job requeue", "node failure on node2"]
    row = from_sacct("8|CANCELLED by 0|0:15|node[1-2]|2026-11-23T08:45:04|2026-11-23T08:45:05")
    assert (row["JobState"], row["ExitCode"], row["NodeList"]) == ("CANCELLED", "0:15", "node[1-2]")


def test_the_rendered_script_runs_under_bash_with_slurm_variables(tmp_path: Path) -> None:
    """The script's own shell logic (node addresses, the rendezvous, the launch line) with stand-ins for
    Slurm's commands: what srun would start on each node is printed instead of run. No port is fixed or derived
    from the job id (another user could bind it in advance): node 0's agent is given port 0 and writes where
    it listens into the run folder, emptied of an earlier run's file first."""
    plan = render(TINY, "resources.nodes=2", f"slurm.workdir={tmp_path}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tools = {
        "scontrol": 'if [ "$2" = hostnames ]; then printf "n1\\nn2\\n"; else '
        'echo "NodeName=n1 Arch=x NodeAddr=10.0.0.1 NodeHostName=h1 Port=1"; '
        'echo "NodeName=n2 Arch=x NodeAddr=10.0.0.2 NodeHostName=h2 Port=2"; fi',
        "srun": 'printf "%s\\0" "$@" > srun.args',
    }
    for name, body in tools.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]"}
    script = plan.documents["job.sbatch"]
    assert "--rdzv-id" not in script  # the id is not in any argv (ps); torchrun reads PET_RDZV_ID
    assert "rdzv_port" not in script and "SLURM_JOB_ID *" not in script and "--rdzv-endpoint=" not in script
    assert '"$rdzv_file" "$rdzv" 0 --nnodes' in flat(script)
    endpoint = tmp_path / "runs" / "tiny-t1" / ".cloudddp-rendezvous"
    endpoint.parent.mkdir(parents=True)
    endpoint.write_text("10.9.9.9:4242")  # an earlier run's
    unnamed = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert unnamed.returncode != 0 and "PET_RDZV_ID" in unnamed.stderr and not (tmp_path / "srun.args").exists()
    env["PET_RDZV_ID"] = "0123456789abcdef0123456789abcdef"  # what submit puts in sbatch's environment
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    srun_args = (tmp_path / "srun.args").read_text().split("\0")[:-1]
    at = srun_args.index("cloudddp-node")
    assert srun_args[at + 1 : at + 3] == ["10.0.0.1", "n1=10.0.0.1\nn2=10.0.0.2"], srun_args
    assert srun_args[at + 4 : at + 6] == [AGENT, str(endpoint)] and not endpoint.exists()
    launcher = ["python3", "_cloudddp_launch.py", "--cloudddp-00", '{"stops":"platform"}', "--"]
    assert srun_args[at + 6 :] == [*launcher, "python3", "train.py", "--epochs", "3"]  # Slurm signals each rank
    assert srun_args[at - 3 : at - 1] == ["bash", "-c"]
    assert srun_args[: at - 3] == [
        "--export=ALL",
        "--ntasks-per-node=1",
        "--cpus-per-task=1",
        "--kill-on-bad-exit=1",
        f"--output={tmp_path}/runs/tiny-t1/logs/node%n.log",
        "--open-mode=append",
    ]


def test_requirements_environments_are_keyed_on_their_base_and_checked_by_the_job(tmp_path: Path) -> None:
    """Built at submit (install_on: login) the job only checks it; built by the job otherwise. Another
    slurm.python, module or setup line is another environment; a container is refused."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("")
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"name: deps\ncode: {{dir: {tmp_path / 'code'}, requirements: [einops>=0.7]}}\n"
        f"slurm: {{workdir: {tmp_path / 'w'}, python: /opt/py/bin/python3}}\n"
    )
    plan = render(spec)
    env = plan.request.environment.folder
    key = plan.request.environment.key
    script = plan.documents["job.sbatch"]
    assert env == f"{tmp_path / 'w'}/envs/{key[:16]}"
    assert any(
        d.startswith("requirements (1 from code.requirements): installed at submit on this machine")
        for d in plan.decisions
    ), plan.decisions
    assert f"cloudddp_env {env} /opt/py/bin/python3 {key} check requirements.txt || exit 1" in script
    assert f'\n{env}/bin/python -c "$wrapper" "$rdzv_file"' in script
    in_job = render(spec, "slurm.install_on=job")
    assert in_job.request.environment is None
    assert f"cloudddp_env {env} /opt/py/bin/python3 {key} build requirements.txt" in in_job.documents["job.sbatch"]
    others = [
        render(spec, o).request.environment.folder
        for o in (
            "slurm.python=/other/python3",
            "slurm.modules=[python/3.11]",
            "slurm.setup=['source /v/bin/activate']",
        )
    ]
    assert len({env, *others}) == 4, others
    bash_accepts(script)
    refused = cli("render", str(spec), "-b", "slurm", "-o", "slurm.container={image: img.sif, runtime: apptainer}")
    assert refused.returncode == 2 and "install the requirements in the image" in refused.stderr


def test_tensorboard_goes_to_the_run_folder_and_a_recovery_attempt_gets_its_own_run() -> None:
    plan = render(TINY, "outputs={tensorboard: {}}")
    run_dir = plan.request.run_dir
    assert plan.request.env["CLOUDDDP_TENSORBOARD_DIR"] == f"{run_dir}/tensorboard"
    assert f"{run_dir}/tensorboard" in plan.request.folders
    backend = get_backend("slurm")
    second = backend.for_attempt(plan, 2)
    third = backend.for_attempt(second, 3)
    assert (second.request.run_id, third.request.run_id) == ("tiny-t1-r2", "tiny-t1-r3")
    assert third.request.env["CLOUDDDP_CHECKPOINT_DIR"] == plan.request.env["CLOUDDDP_CHECKPOINT_DIR"]
    assert third.request.run_dir.endswith("/runs/tiny-t1-r3") and "tiny-t1-r2" not in third.documents["job.sbatch"]
    assert "#SBATCH --job-name=tiny-t1-r3" in third.documents["job.sbatch"] and third.job_name == "tiny"


def test_log_lines_of_several_nodes_come_in_the_order_of_the_starts_they_belong_to() -> None:
    """A requeued job whose rank 0 moved from node 1 to node 0: its lines read back run by run."""
    labels = Labels(2, per_task=False, per_node=1)
    node0 = [
        "[default0]:cloudddp: rank 1 of 2 (local rank 0)",
        "[default0]:cloudddp: rank 0 of 2 (local rank 0)",
        "[default0]:step 3",
    ]
    node1 = [
        "[default0]:cloudddp: rank 0 of 2 (local rank 0)",
        "[default0]:step 1",
        "W torchrun's own words",
        "[default0]:cloudddp: rank 1 of 2 (local rank 0)",
    ]
    batch = [
        (0, "cloudddp: run 0 of Slurm job 1"),
        (0, "cloudddp: run 1 of Slurm job 1"),
        *[(1, t) for t in node0],
        *[(2, t) for t in node1],
    ]
    lines = [(line.source, line.text, line.primary) for line in labels.ordered(batch)]
    assert lines == [
        ("slurm", "cloudddp: run 0 of Slurm job 1", False),
        ("node0/rank1", "cloudddp: rank 1 of 2 (local rank 0)", False),
        ("node1/rank0", "cloudddp: rank 0 of 2 (local rank 0)", False),
        ("node1/rank0", "step 1", True),
        ("node1", "W torchrun's own words", False),
        ("slurm", "cloudddp: run 1 of Slurm job 1", False),
        ("node0/rank0", "cloudddp: rank 0 of 2 (local rank 0)", False),
        ("node0/rank0", "step 3", True),
        ("node1/rank1", "cloudddp: rank 1 of 2 (local rank 0)", False),
    ]
    tasks = Labels(1, per_task=True, per_node=2)
    assert [(x.source, x.text, x.primary) for x in tasks.ordered([(1, "1: hi"), (1, "0: there"), (1, "srun: x")])] == [
        ("rank1", "hi", False),
        ("rank0", "there", True),
        ("node0", "srun: x", False),
    ]


def test_a_snapshot_whose_sha256_is_not_the_plans_is_not_unpacked(tmp_path: Path) -> None:
    """The unpack step on the cluster checks the archive against the plan's sha256 before extracting it."""
    archive = tmp_path / "code.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(__file__, arcname="train.py")
    right = hashlib.sha256(archive.read_bytes()).hexdigest()
    unpack = ["bash", "-c", slurm_launch._UNPACK, "cloudddp-unpack"]
    wrong = subprocess.run([*unpack, str(tmp_path / "a"), str(archive), "0" * 64], capture_output=True, text=True)
    assert wrong.returncode == 3 and "is not the one uploaded" in wrong.stderr and not (tmp_path / "a").exists()
    ok = subprocess.run([*unpack, str(tmp_path / "b"), str(archive), right], capture_output=True, text=True)
    assert ok.returncode == 0 and (tmp_path / "b" / "train.py").is_file(), ok.stderr


def test_a_runs_end_record_reads_as_slurms_record_would() -> None:
    """The run folder's end record (when Slurm has forgotten the job): the exit code decides a run Slurm was not
    ending; one it was ending is that ending (a cancel shows as COMPLETING while the script exits)."""
    done = from_ended("exit=0 restarts=2 slurm=RUNNING end=2026-11-27T15:00:00+0000\n")
    assert done is not None and (done["JobState"], done["Restarts"], done["ExitCode"]) == ("COMPLETED", "2", "0:0")
    assert timestamp(done["EndTime"]) == 1795791600.0
    assert from_ended("exit=124 restarts=0 slurm=RUNNING end=x") == {
        **done,
        "JobState": "FAILED",
        "ExitCode": "124:0",
        "Restarts": "0",
        "EndTime": "x",
    }
    cancelled, timed_out = from_ended("exit=0 slurm=COMPLETING"), from_ended("exit=1 slurm=TIMEOUT")
    assert cancelled is not None and cancelled["JobState"] == "CANCELLED"
    assert timed_out is not None and timed_out["JobState"] == "TIMEOUT"
    assert from_ended("") is None and from_ended("exit= slurm=RUNNING") is None


@pytest.mark.parametrize("workdir", ["given", "bound at submit"])
@pytest.mark.parametrize("preempt_time", ["2026-11-27T15:00:00", "None"])
def test_the_warning_signal_is_told_as_a_preemption_or_the_time_limit_and_the_end_is_recorded(
    tmp_path: Path, preempt_time: str, workdir: str
) -> None:
    """USR1 comes before the time limit, or at a preemption on a cluster with send_user_signal: the batch log says
    which, never a preemption as the time limit. A preempted run requeues itself and records no end; a run stopped
    ahead of the limit records its exit, in its run folder whether the working folder was given or bound at submit.
    Stand-ins for Slurm's commands: srun sends the script USR1 as Slurm would, and scontrol answers the job's
    record."""
    given = workdir == "given"
    plan = render(TINY, f"slurm.workdir={tmp_path}") if given else render(TINY).bind({LATE: str(tmp_path)})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = f"JobId=7 JobState=RUNNING Restarts=0 PreemptTime={preempt_time} SuspendTime=None"
    tools = {
        "scontrol": f'case "$1 $2" in "show hostnames") echo n1;; "requeue 7") exit 0;; *) echo "{record}";; esac',
        "srun": "kill -USR1 $PPID; sleep 1",
        "scancel": "exit 0",
    }
    for name, body in tools.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NODELIST": "n1",
        "PET_RDZV_ID": "0123456789abcdef0123456789abcdef",
    }
    ended = tmp_path / "runs" / "tiny-t1" / ENDED_FILE
    ended.parent.mkdir(parents=True)  # submit makes it
    done = subprocess.run(["bash", "-c", plan.documents["job.sbatch"]], capture_output=True, text=True, env=env)
    if preempt_time != "None":
        assert done.returncode == 0 and f"{PREEMPT_MARK}: the warning signal came with a preemption" in done.stdout
        assert "time limit" not in done.stdout and "requeueing Slurm job 7 after preemption" in done.stdout
        assert not ended.exists()  # requeued: the run goes on
    else:
        assert done.returncode == LIMIT_EXIT and f"{LIMIT_MARK} " in done.stdout and PREEMPT_MARK not in done.stdout
        assert ended.read_text().startswith(f"exit={LIMIT_EXIT} restarts=0 slurm=RUNNING end=")


def test_a_users_own_ssh_master_is_used_where_their_config_names_one(tmp_path: Path) -> None:
    """A login node with MFA is reached through the master connection the user opened by hand (their
    ~/.ssh/config's ControlPath); cloudddp's own ControlPath would bypass it and, with BatchMode, fail."""
    theirs = tmp_path / "theirs"
    theirs.write_text(f"Host login\n  ControlMaster auto\n  ControlPath {tmp_path}/cm-%C\n")
    plain = tmp_path / "plain"
    plain.write_text("Host login\n  User me\n")
    own = Shell("login", ("-F", str(theirs))).argv(["true"])
    assert not any(word.startswith("ControlPath=") or word.startswith("ControlMaster=") for word in own), own
    ours = Shell("login", ("-F", str(plain))).argv(["true"])
    assert f"ControlPath={Shell('login').control_path}" in ours, ours
