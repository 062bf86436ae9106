"""Slurm as real clusters are configured, on the real two-node cluster (tests/support/slurm_cluster.py):
environments keyed on the base the setup lines make, a submit from inside an allocation, each task's CPUs,
how often following a job asks the controller (counted by wrappers around Slurm's own tools), times in the
cluster's zone, held jobs, and one ssh login for all of a run's commands. Offline parts:
tests/backends/slurm/test_site_options_offline.py."""

from __future__ import annotations

import errno
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.slurm.shell import Shell
from cloudddp.backends.status import RunState
from cloudddp.paths import home
from tests.support.cli import FIXTURES, cli
from tests.support.clock import time_zone
from tests.support.rigs import rig_unavailable
from tests.support.slurm_cluster import SlurmCluster
from tests.support.ssh_server import SshUnavailable, ssh_server
from tests.support.wheels import wheel

pytestmark = pytest.mark.slow
TINY = FIXTURES / "tinyjob" / "job.yaml"
ON_CLUSTER = [f"slurm.python={sys.executable}", "slurm.kill_wait=5", "slurm.status_every=1"]


def command_job(tmp_path: Path, name: str, command: str, **slurm: object) -> Path:
    """A spec whose every process runs ``bash -c command`` (srun launch; slurm.python has torch: rank 0's task
    hosts the rendezvous store with it)."""
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(
        json.dumps(
            {
                "name": name,
                "code": {"dir": str(FIXTURES / "tinyjob"), "command": ["bash", "-c", command]},
                "slurm": {"launch": "srun", "python": sys.executable, "kill_wait": 5, "status_every": 1, **slurm},
            }
        )
    )
    return spec


def test_two_jobs_whose_setup_lines_make_different_bases_get_different_environments(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    """Same requirements, setup lines activating two different venvs: two environments, each layered over its
    own base; one changed after it was built is built again at the next submit, never used."""
    code = tmp_path / "code"
    (code / "wheels").mkdir(parents=True)
    wheel(code / "wheels")
    probe = (
        "import json, os, sys, rehearsal_dep; print(json.dumps([sys.executable, os.environ['VIRTUAL_ENV'], "
        "rehearsal_dep.VALUE]))"
    )
    (code / "probe.py").write_text(probe + "\n")
    runs = {}
    for base in ("base-a", "base-b"):
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(tmp_path / base)],
            check=True,
            timeout=120,
        )
        spec = tmp_path / f"{base}.yaml"
        spec.write_text(
            json.dumps(
                {
                    "name": base,
                    "code": {
                        "dir": str(code),
                        "command": ["python", "probe.py"],
                        "requirements": ["--no-index", "./wheels/rehearsal_dep-1.0-py3-none-any.whl"],
                    },
                    "slurm": {
                        "launch": "srun",
                        "python": "python",
                        "setup": [f"source {tmp_path / base}/bin/activate"],
                        "kill_wait": 5,
                        "status_every": 1,
                    },
                }
            )
        )
        runs[base] = Job.load(spec).submit("slurm", poll_seconds=0.2)
    seen = {}
    for base, run in runs.items():
        status = run.wait(timeout=120, poll=0.5)
        assert status.state is RunState.SUCCEEDED, (status, [line.text for line in run.logs()])
        (line,) = [json.loads(x.text) for x in run.logs() if x.text.startswith("[")]
        python, venv, value = line
        assert venv == str(tmp_path / base) and value == "from requirements.txt", line
        seen[base] = Path(python).parent.parent
    envs = home() / "slurm" / "envs"
    assert seen["base-a"] != seen["base-b"] and {p.parent for p in seen.values()} == {envs}, seen
    for base, env in seen.items():
        layer = next(env.rglob("_cloudddp_layer.pth")).read_text()
        assert str(tmp_path / base) in layer, (base, layer)  # layered over its own base, not the other's
    planted = next(seen["base-a"].rglob("rehearsal_dep.py"))
    target = os.readlink(seen["base-a"])
    planted.write_text("VALUE = 'planted'\n")
    again = Job.load(tmp_path / "base-a.yaml").submit("slurm", poll_seconds=0.2)
    status = again.wait(timeout=120, poll=0.5)
    assert status.state is RunState.SUCCEEDED, status
    assert [json.loads(x.text)[2] for x in again.logs() if x.text.startswith("[")] == ["from requirements.txt"]
    assert os.readlink(seen["base-a"]) != target  # built again, published under the same name


def test_a_job_step_without_network_runs_with_requirements_built_at_submit_from_an_index(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    """Compute nodes without a network: the requirement comes from an index only the login node reaches (a
    local one, stopped once submit returns), and the job step runs in a network namespace of its own
    (``unshare -rn``). With ``install_on: login`` (the default) the environment was built at submit, so the
    step runs with it."""
    index = tmp_path / "index"
    (index / "simple" / "rehearsal-dep").mkdir(parents=True)
    wheel(index)
    (index / "simple" / "rehearsal-dep" / "index.html").write_text(
        '<a href="../../rehearsal_dep-1.0-py3-none-any.whl">rehearsal_dep-1.0-py3-none-any.whl</a>\n'
    )
    requests: list[str] = []

    class Index(SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(index), **kwargs)  # type: ignore[arg-type]

        def log_message(self, format: str, *args: object) -> None:
            requests.append(self.path)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    code = tmp_path / "code"
    code.mkdir()
    (code / "probe.py").write_text(
        "import json, socket, sys, rehearsal_dep\n"
        "try:\n"
        "    socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=10).close(); reached = 0\n"
        "except OSError as e:\n"
        "    reached = e.errno\n"
        "print(json.dumps([reached, [n for _, n in socket.if_nameindex()], rehearsal_dep.VALUE]))\n"
    )
    spec = tmp_path / "offline.yaml"
    spec.write_text(
        json.dumps(
            {
                "name": "offline",
                "code": {
                    "dir": str(code),
                    "command": ["unshare", "-rn", "python", "probe.py", str(port)],
                    "requirements": [f"--index-url http://127.0.0.1:{port}/simple", "rehearsal-dep==1.0"],
                },
                "slurm": {"launch": "srun", "install_on": "login"},
            }
        )
    )
    try:
        run = Job.load(spec, ON_CLUSTER).submit("slurm", poll_seconds=0.2)
    finally:
        server.shutdown()
        server.server_close()
    assert any(path.endswith(".whl") for path in requests), requests  # built at submit, over the network
    status = run.wait(timeout=180, poll=0.5)
    logs = [line.text for line in run.logs()]
    assert status.state is RunState.SUCCEEDED, (status, logs)
    (line,) = [json.loads(x) for x in logs if x.startswith("[")]
    reached, interfaces, value = line
    # Unreachable, not refused: the step has no network at all (only its own loopback, down).
    assert (reached, interfaces, value) == (errno.ENETUNREACH, ["lo"], "from requirements.txt"), line


def test_sbatch_from_inside_an_allocation_runs_the_job(
    cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The submitting shell carries an allocation's variables (as under `srun --pty` or Open OnDemand):
    passed to sbatch, SLURM_MEM_PER_CPU makes the job's srun fatal; cloudddp leaves them out."""
    outer = {
        "SLURM_MEM_PER_CPU": "100",
        "SLURM_JOB_ID": "999999",
        "SLURM_JOBID": "999999",
        "SLURM_NTASKS": "7",
        "SLURM_CPUS_PER_TASK": "2",
        "SBATCH_TIMELIMIT": "1",
        "SRUN_CPUS_PER_TASK": "2",
    }
    control = tmp_path / "control.sbatch"
    control.write_text("#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --mem=100\nsrun true\n")
    raw = subprocess.run(
        ["sbatch", "--parsable", f"--output={tmp_path}/control.log", str(control)],
        capture_output=True,
        text=True,
        env={**cluster.command_env(), **outer},
        timeout=30,
        check=True,
    )
    ended = cluster.wait_job(raw.stdout.strip().split(";")[0], timeout=60)
    assert ended["JobState"] == "FAILED", ended  # what the outer variables do when passed on
    assert "mutually exclusive" in (tmp_path / "control.log").read_text()
    for name, value in outer.items():
        monkeypatch.setenv(name, value)
    spec = command_job(tmp_path, "inside", 'echo "rank $RANK of $WORLD_SIZE in job $SLURM_JOB_ID"', mem="100")
    run = Job.load(spec, ["resources.nodes=2"]).submit("slurm", poll_seconds=0.2)
    status = run.wait(timeout=90, poll=0.5)
    assert status.state is RunState.SUCCEEDED, (status, [line.text for line in run.logs()])
    said = sorted(line.text for line in run.logs() if line.text.startswith("rank "))
    job_id = status.details["job_id"]
    assert said == [f"rank 0 of 2 in job {job_id}", f"rank 1 of 2 in job {job_id}"], said


def test_each_srun_task_has_its_processes_cpus_in_its_affinity(cluster: SlurmCluster, tmp_path: Path) -> None:
    """slurm.cpus_per_process: srun is given --cpus-per-task (Slurm 22.05 no longer reads it from the
    environment), so with the cluster binding tasks to cores each process sees its own CPUs, and the shared
    script's threads follow them."""
    probe = (
        "import json, os, sys; sys.path.insert(0, os.environ['SRC']); from ddptrain.distributed import cpu_threads; "
        "local = int(os.environ['LOCAL_WORLD_SIZE']); "
        "print(json.dumps([int(os.environ['RANK']), len(os.sched_getaffinity(0)), cpu_threads(local)]))"
    )
    src = str(Path(__file__).parents[3] / "src_train")
    for per_process, per_node in ((2, 1), (1, 2)):
        spec = command_job(
            tmp_path,
            f"cpus{per_process}",
            f"SRC={src} {sys.executable} -c {json.dumps(probe)}",
            cpus_per_process=per_process,
        )
        run = Job.load(spec, [f"resources.processes_per_node={per_node}", "resources.nodes=2"]).submit("slurm")
        status = run.wait(timeout=90, poll=0.5)
        assert status.state is RunState.SUCCEEDED, (status, [line.text for line in run.logs()])
        seen = sorted(json.loads(x.text) for x in run.logs() if x.text.startswith("["))
        assert [cpus for _, cpus, _ in seen] == [per_process] * 2 * per_node, seen
        assert [threads for _, _, threads in seen] == [per_process] * 2 * per_node, seen


@pytest.fixture
def counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """scontrol, squeue and sacct on PATH as wrappers that log each call and run the real tool in another time
    zone than this process's (the cluster's zone is not the client's)."""
    log = tmp_path / "calls.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("scontrol", "squeue", "sacct"):
        real = shutil.which(tool)
        assert real, tool
        (bin_dir / tool).write_text(
            f'#!/bin/bash\necho "$(date +%s.%N) job=${{SLURM_JOB_ID:-}} {tool} $*" >> {log}\n'
            f'TZ=Asia/Kathmandu exec {real} "$@"\n'
        )
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    with time_zone("America/New_York"):
        yield log


def client_calls(log: Path, since: float) -> list[tuple[float, str]]:
    """The calls cloudddp made (not the job's own, which run with SLURM_JOB_ID set), from ``since``."""
    calls = []
    for line in log.read_text().splitlines():
        at, job, rest = line.split(" ", 2)
        if job == "job=" and float(at) >= since:
            calls.append((float(at), rest))
    return calls


def test_following_a_30_s_job_asks_the_controller_at_most_once_per_interval(
    cluster: SlurmCluster, tmp_path: Path, counted: Path
) -> None:
    """slurm.status_every: 3. The logs are read every 0.2 s, on their own; scontrol/squeue/sacct are asked at
    most once per 3 s. Times are read in the cluster's zone (UTC+5:45 here, the client UTC-5)."""
    spec = command_job(tmp_path, "thirty", "for i in $(seq 1 12); do echo tick $i; sleep 2.5; done", status_every=3)
    submitted = time.time()
    run = Job.load(spec).submit("slurm", poll_seconds=0.2)
    began = time.time()
    ticks = [line.text for line in run.logs(follow=True) if line.text.startswith("tick ")]
    ended = time.time()
    assert ticks == [f"tick {i}" for i in range(1, 13)], ticks
    calls = client_calls(counted, began)
    assert ended - began >= 27 and calls, (ended - began, calls)
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(calls)]
    assert all(gap >= 2.7 for gap in gaps), list(zip(gaps, calls[1:], strict=False))
    assert len(calls) <= (ended - began) / 3 + 2, calls
    status = run.status()
    assert status.state is RunState.SUCCEEDED, status
    assert status.created_at is not None and abs(status.created_at - submitted) < 60, (status.created_at, submitted)
    assert status.ended_at is not None and abs(status.ended_at - ended) < 60, (status.ended_at, ended)


def test_a_held_job_says_so_with_its_reason_and_runs_once_released(cluster: SlurmCluster, tmp_path: Path) -> None:
    spec = command_job(tmp_path, "held", "echo released", sbatch_options=["-H"])
    run = Job.load(spec).submit("slurm", poll_seconds=0.2)
    status = run.status()
    job_id = status.details["job_id"]
    assert status.state is RunState.PENDING and status.details.get("held") is True, status
    assert status.message.startswith("held (JobHeldUser): its user held it") and f"scontrol release {job_id}" in (
        status.message
    ), status.message
    cluster.run("scontrol", "release", job_id)
    done = run.wait(timeout=60, poll=0.5)
    assert done.state is RunState.SUCCEEDED and [x.text for x in run.logs() if x.primary] == ["released"], done


def test_through_ssh_one_login_serves_every_command_of_a_run(
    cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A master connection in a private folder (ControlMaster/ControlPersist): sshd sees one login for the
    upload, sbatch, every status and log read."""
    monkeypatch.delenv("SLURM_CONF", raising=False)
    root = tmp_path / "sshd"
    try:
        server_context = ssh_server(root, {"SLURM_CONF": str(cluster.conf)})
        server = server_context.__enter__()
    except SshUnavailable as e:
        rig_unavailable(f"no sshd to stand in for a login node, so connection reuse is not tested here: {e}")
    try:
        accepted_before = len(re.findall("Accepted publickey", (root / "sshd.log").read_text()))
        spec = command_job(
            tmp_path,
            "overssh",
            "echo on $SLURMD_NODENAME",
            login_host=server.host,
            ssh_options=list(server.options),
            workdir=str(tmp_path / "shared"),
        )
        run = Job.load(spec, ["resources.nodes=2"]).submit("slurm", poll_seconds=0.2)
        status = run.wait(timeout=90, poll=0.5)
        assert status.state is RunState.SUCCEEDED, status
        assert sorted(x.text for x in run.logs() if x.text.startswith("on ")) == ["on node1", "on node2"]
        shell = Shell(server.host, server.options)
        folder = Path(shell.control_path).parent
        assert folder.stat().st_mode & 0o077 == 0 and list(folder.glob("ssh-*")), list(folder.iterdir())
        logins = len(re.findall("Accepted publickey", (root / "sshd.log").read_text())) - accepted_before
        assert logins == 1, (root / "sshd.log").read_text()[-3000:]
        assert shell.connected()
        shell.close()
        assert not shell.connected()  # the master connection is gone: nothing left running
    finally:
        server_context.__exit__(None, None, None)


def test_sbatch_options_are_what_this_clusters_sbatch_accepts(cluster: SlurmCluster, tmp_path: Path) -> None:
    """--wait-all-nodes (which sbatch 22.05's --help does not even list) runs; an option that is not
    sbatch's own (a plugin's, as pyxis's --container-image is) renders with a warning and is refused at submit by
    the cluster's own sbatch --help, as is an option from a newer Slurm than this one (22.05)."""
    spec = command_job(tmp_path, "wait-all", "echo all nodes up", sbatch_options=["--wait-all-nodes=1"])
    run = Job.load(spec, ["resources.nodes=2"]).submit("slurm")
    status = run.wait(timeout=90, poll=0.5)
    assert status.state is RunState.SUCCEEDED, (status, [line.text for line in run.logs()])
    assert "#SBATCH --wait-all-nodes=1" in (Path(status.details["run_dir"]) / "job.sbatch").read_text()
    plugin = command_job(tmp_path, "plugin", "true", sbatch_options=["--container-image=pytorch:24.01", "--stepmgr"])
    rendered = cli("render", str(plugin), "-b", "slurm")
    assert rendered.returncode == 0 and "--container-image is not one of sbatch's own options" in rendered.stderr
    refused = cli("submit", str(plugin), "-b", "slurm")
    assert refused.returncode != 0, refused
    said = refused.stdout + refused.stderr
    assert "this cluster's sbatch has no --stepmgr (Slurm 24.05), --container-image (not in its sbatch --help" in said
    assert "plugstack.conf" in said, said


def test_a_spank_plugins_option_runs_where_the_clusters_sbatch_offers_it(cluster: SlurmCluster, tmp_path: Path) -> None:
    """The test cluster loads a SPANK plugin (tests/support/spank/cddp_tag.c) that gives its sbatch
    --cddp-tag=VALUE. In slurm.sbatch_options it renders with a warning (cloudddp's table does not know it), passes
    submit's check against the cluster's own sbatch --help, and every task of the job sees the value."""
    if cluster.spank_unavailable:
        rig_unavailable(
            f"the test cluster has no SPANK plugin, so a plugin's option is not tested: {cluster.spank_unavailable}"
        )
    spec = command_job(tmp_path, "tagged", 'echo "tag=$CDDP_TAG on $SLURMD_NODENAME"', sbatch_options=["--cddp-tag=x"])
    rendered = cli("render", str(spec), "-b", "slurm")
    assert rendered.returncode == 0 and "--cddp-tag is not one of sbatch's own options" in rendered.stderr, rendered
    run = Job.load(spec, ["resources.nodes=2"]).submit("slurm")
    status = run.wait(timeout=90, poll=0.5)
    assert status.state is RunState.SUCCEEDED, (status, [line.text for line in run.logs()])
    assert "#SBATCH --cddp-tag=x" in (Path(status.details["run_dir"]) / "job.sbatch").read_text()
    said = sorted(line.text for line in run.logs() if line.text.startswith("tag="))
    assert said == ["tag=x on node1", "tag=x on node2"], said
