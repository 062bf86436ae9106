"""The Slurm backend on a real two-node Slurm 22.05 cluster (tests/support/slurm_cluster.py): the shared script
and a tutorial script train through sbatch/srun, a requeued job resumes without losing or repeating a step,
a dead node is named, the time-limit signal stops the training cleanly, and secrets reach the processes
without being written anywhere. Slurm is reached as a user reaches theirs: its commands on PATH and
SLURM_CONF in the environment."""

from __future__ import annotations

import hashlib
import io
import json
import re
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudddp.api import Job, Run
from cloudddp.backends.slurm.shell import Shell
from cloudddp.backends.slurm.workdir import bound
from cloudddp.backends.status import Cause, RunState
from cloudddp.paths import home
from cloudddp.runs.runner import get_backend
from tests.backends.slurm.conftest import cancel_leftover_jobs
from tests.support.cli import FIXTURES, ROOT, cli
from tests.support.rigs import rig_unavailable
from tests.support.slurm_cluster import SlurmCluster
from tests.support.ssh_server import SshServer, SshUnavailable, ssh_server
from tests.support.train_helpers import assert_every_step_once
from tests.support.waiting import LOADED, wait_until
from tests.support.wheels import wheel

pytestmark = pytest.mark.slow
DIGITS = ROOT / "jobs" / "digits-local.yaml"
OWN = FIXTURES / "ownscript"
ON_CLUSTER = [f"slurm.python={sys.executable}", "slurm.kill_wait=5", "slurm.status_every=1"]


@pytest.fixture
def cluster(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """The shared fixture's cluster, and every node given back whatever a test did to it (a killed slurmd)."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    yield slurm_cluster
    cancel_leftover_jobs(slurm_cluster, seconds=20)
    slurm_cluster.restore_nodes()  # a test that killed a node and failed half-way gives it back too


def submit(spec: Path, *overrides: str) -> Run:
    return Job.load(spec, [*ON_CLUSTER, *overrides]).submit("slurm", poll_seconds=0.2)


def job_id(run: Run) -> str:
    return str(run.status().details["job_id"])


@pytest.mark.timeout(LOADED + 300)
def test_a_requeued_two_node_job_resumes_from_its_checkpoint_and_runs_every_step_once(cluster: SlurmCluster) -> None:
    """The shared script on 2 nodes × 1 process (torchrun, c10d): `scontrol requeue` mid-run sends SIGTERM,
    rank 0 checkpoints, Slurm runs the script again and the training continues where it stopped. A requeue that
    lands between epochs proves nothing about the step within an epoch, so the job is requeued again (at most
    three times) until one stop has landed mid-epoch."""
    run = submit(
        DIGITS,
        "name=slurm-requeue",
        "resources.nodes=2",
        "checkpoint.resume=auto",
        "code.args=[--dataset, digits, --epochs, '5', --batch-size, '32', --log-every, '1', --eval-every, '5']",
    )

    def stops() -> list[str]:
        return [line.text for line in run.logs() if "stopping on SIGTERM" in line.text]

    def resumes() -> int:
        return sum("resumed from" in line.text for line in run.logs())

    requeues, mid_epoch = 0, False
    while not mid_epoch and requeues < 3:
        # Only this attempt's records count: the last one may have trained on past the epoch asked for before its
        # SIGTERM landed, and a requeue sent before the new attempt resumed would find no script to stop.
        wait_until(lambda n=requeues: resumes() == n, timeout=LOADED)
        earlier = len(list(run.metrics()))
        for index, record in enumerate(run.metrics(follow=True)):
            if index >= earlier and record.epoch is not None and record.epoch >= requeues + 2:  # then further
                break
        cluster.run("scontrol", "requeue", job_id(run))
        requeues += 1
        wait_until(lambda n=requeues: len(stops()) == n, timeout=LOADED)  # rank 0 checkpointed on the SIGTERM
        mid_epoch = "stopping on SIGTERM at epoch" in stops()[-1]  # else "at the end of epoch N"
    assert mid_epoch, stops()
    status = run.wait(timeout=LOADED, poll=0.5)
    assert status.state is RunState.SUCCEEDED, status
    assert status.details["restarts"] == requeues and status.details["nodes"] == "node[1-2]"
    text = [line.text for line in run.logs()]
    assert sum("resumed from" in t for t in text) == requeues, text[-30:]
    assert sum("cloudddp: run " in t for t in text) == requeues + 1  # the batch script ran again each time
    assert_every_step_once(list(run.metrics()), epochs=5)  # each (epoch, step in it) once, none lost
    sources = {line.source for line in run.logs()}
    assert {"node0/rank0", "node1/rank1"} <= sources or {"node0/rank1", "node1/rank0"} <= sources, sources
    model = Path(status.details["run_dir"]) / "outputs" / "model.pt"
    assert model.is_file()


def _plant(archive: Path, marker: Path) -> None:
    """A snapshot under the name the job's own will have, whose train.py would leave ``marker`` behind."""
    script = f"open({str(marker)!r}, 'w').write('planted code ran')\n".encode()
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("train.py")
        info.size = len(script)
        tar.addfile(info, io.BytesIO(script))


def test_the_shared_script_on_one_node_with_two_processes_through_the_cli(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    """... with a snapshot planted in the shared working folder under the name this commit's snapshot has: it is
    replaced (its sha256 is checked on the cluster) and never runs."""
    args = ["resources.processes_per_node=2", "code.args=[--dataset, digits, --epochs, '1', --batch-size, '128']"]
    (upload,) = bound(Job.load(DIGITS, [*ON_CLUSTER, *args]).render("slurm")).uploads  # where submit puts it
    marker = tmp_path / "planted-code-ran"
    _plant(Path(upload["destination"]), marker)
    result = cli(
        "submit",
        str(DIGITS),
        "-b",
        "slurm",
        *(x for o in ON_CLUSTER for x in ("-o", o)),
        "-o",
        "resources.processes_per_node=2",
        "-o",
        "code.args=[--dataset, digits, --epochs, '1', --batch-size, '128']",
        env={"CLOUDDDP_SLURM_POLL": "0.2"},
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "test_acc=" in result.stdout and "succeeded" in result.stderr, result.stdout[-2000:] + result.stderr[-2000:]
    run_id = re.search(r"^submitted (\S+) \(slurm\)", result.stderr, re.MULTILINE).group(1)
    status = cli("status", run_id, "--json")
    assert status.returncode == 0, status.stderr[-3000:]
    assert json.loads(status.stdout)["state"] == "succeeded", status.stdout
    logs = cli("logs", run_id).stdout
    assert "[rank0] CLOUDDDP_METRIC" in logs and "[rank1] cloudddp: rank 1 of 2 (local rank 1)" in logs, logs[-2000:]
    assert "[slurm runtime] cloudddp: run 0 of Slurm job" in logs  # the batch script's words, not the program's
    script = Path(json.loads(status.stdout)["details"]["run_dir"]) / "job.sbatch"
    assert "#SBATCH --nodes=1" in script.read_text() and "--nproc-per-node=2" in script.read_text()
    said = " ".join(result.stderr.split())  # however the console wrapped it
    assert re.search(r"is not snapshot [0-9a-f]{12}: replacing it", said) and not marker.exists(), said[-2000:]
    assert hashlib.sha256(Path(upload["destination"]).read_bytes()).hexdigest() == upload["sha256"]
    cost = cli("cost", run_id)  # Slurm bills nothing cloudddp can read: said, with the reason, next to the estimate
    assert cost.returncode == 0 and "reports no figures about what a run cost" in cost.stdout, cost.stdout + cost.stderr


def test_a_tutorial_script_runs_on_two_nodes_with_its_own_metrics_and_leaves_its_folder_alone(
    cluster: SlurmCluster,
) -> None:
    """tests/fixtures/ownscript reads RANK/LOCAL_RANK as torchrun sets them; here srun's tasks get them."""
    before = {p.name for p in OWN.iterdir()}
    run = submit(OWN / "job.yaml", "slurm.launch=srun")
    status = run.wait(timeout=180, poll=0.5)
    assert status.state is RunState.SUCCEEDED, status
    assert [r.epoch for r in run.metrics()] == [0, 1, 2, 3] and all("loss" in r.values for r in run.metrics())
    code = Path(status.details["run_dir"]) / "code"
    assert (code / "snapshot.pt").is_file() and {p.name for p in OWN.iterdir()} == before
    primary = [line.text for line in run.logs() if line.primary]
    assert any(t.startswith("[GPU0] Epoch 3 |") for t in primary) and not any("[GPU1]" in t for t in primary)


def test_a_dead_node_fails_the_attempt_naming_it_and_recovery_submits_it_again(
    cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """slurm.requeue off: the attempt ends NODE_FAIL, named; the recovery watcher (limits.max_recoveries) sees
    an infrastructure cause and submits the job again, which runs once node2 is back."""
    monkeypatch.setenv("CLOUDDDP_RECOVERY_POLL", "0.5")
    once = (
        'case $CLOUDDDP_RUN_ID in *-r2) echo "again on $SLURMD_NODENAME"; exit 0;; esac; '
        "echo up on $SLURMD_NODENAME; while :; do sleep 0.2; done"
    )
    run = submit(
        FIXTURES / "tinyjob" / "job.yaml",
        "resources.nodes=2",
        "slurm.requeue=false",
        "slurm.launch=srun",
        "limits.max_recoveries=1",
        "code.args=[]",
        f"code.command=[bash, -c, {json.dumps(once)}]",
    )
    first = run.run_id
    deadline = time.monotonic() + 60
    while sum("up on" in line.text for line in run.backend.logs(first)) < 2:
        assert time.monotonic() < deadline, list(run.backend.logs(first))
        time.sleep(0.2)
    cluster.kill_node("node2")
    try:
        deadline = time.monotonic() + 60
        while not (lost := run.backend.status(first)).state.terminal:
            assert time.monotonic() < deadline, lost
            time.sleep(0.5)
    finally:
        cluster.start_node("node2")
    assert lost.state is RunState.FAILED and lost.native_state == "NODE_FAIL", lost
    assert lost.message.startswith("node node2 failed: Slurm lost it mid-run") and lost.cause is Cause.INFRASTRUCTURE
    shown = cli("status", first)
    assert shown.returncode == 0 and "node node2 failed" in shown.stdout, shown.stdout + shown.stderr
    status = run.wait(timeout=90, poll=0.5)
    assert status.state is RunState.SUCCEEDED, status
    attempts = status.details["attempts"]
    assert [(a["state"], a["cause"]) for a in attempts] == [("failed", "infrastructure"), ("succeeded", None)]
    assert attempts[1]["run_id"] == f"{first}-r2"
    assert sorted(line.text for line in run.backend.logs(attempts[1]["run_id"]) if "again" in line.text) == [
        "again on node1",
        "again on node2",
    ]
    cluster.wait_nodes("idle", ("node2",), timeout=30)


def test_a_lost_node_is_recovered_and_the_model_is_bitwise_equal_to_an_uninterrupted_run(
    cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shared script on 2 nodes, slurm.requeue off: node2 dies once epoch 2 is checkpointed; the attempt
    ends NODE_FAIL, the recovery watcher submits it again once node2 is back, the new attempt resumes from the
    checkpoint, and the model equals that of a run nobody interrupted, bit for bit."""
    import torch

    monkeypatch.setenv("CLOUDDDP_RECOVERY_POLL", "0.5")
    args = [
        "resources.nodes=2",
        "checkpoint.resume=auto",
        "slurm.requeue=false",
        "code.args=[--dataset, digits, --epochs, '3', --deterministic, --batch-size, '128', --log-every, '1']",
    ]
    clean = submit(DIGITS, "name=slurm-clean", *args)
    assert clean.wait(timeout=180, poll=0.5).state is RunState.SUCCEEDED
    run = submit(DIGITS, "name=slurm-lost", "limits.max_recoveries=1", *args)
    first = run.run_id
    for record in run.backend.metrics(first, follow=True):
        if record.epoch == 2 and "test_acc" in record.values:
            break
    cluster.kill_node("node2")
    try:
        deadline = time.monotonic() + 60
        while not run.backend.status(first).state.terminal:
            assert time.monotonic() < deadline, run.backend.status(first)
            time.sleep(0.5)
    finally:
        cluster.start_node("node2")
    status = run.wait(timeout=240, poll=0.5)
    assert status.state is RunState.SUCCEEDED, status
    attempts = status.details["attempts"]
    assert [(a["state"], a["cause"]) for a in attempts] == [("failed", "infrastructure"), ("succeeded", None)]
    second = Run(attempts[1]["run_id"], run.backend)
    assert any("resumed from" in line.text for line in second.logs())
    assert [r.epoch for r in run.metrics() if "test_acc" in r.values] == [1, 2, 3]

    def model_of(of: Run) -> dict[str, torch.Tensor]:
        return torch.load(Path(of.status().details["run_dir"]) / "outputs" / "model.pt", map_location="cpu")

    want, got = model_of(clean), model_of(second)
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in got)
    cluster.wait_nodes("idle", ("node2",), timeout=30)


def test_the_time_limit_signal_stops_the_training_cleanly_and_says_so(cluster: SlurmCluster) -> None:
    """What ``--signal=B:USR1@<lead>`` does before the time limit, sent now (a real limit takes minutes)."""
    run = submit(
        FIXTURES / "tinyjob" / "job.yaml",
        "slurm.launch=srun",
        "resources.processes_per_node=2",
        "code.args=[]",
        'code.command=[bash, -c, \'trap "echo checkpointed $RANK; exit 0" TERM; echo up $RANK; '
        "while :; do sleep 0.1; done']",
    )
    deadline = time.monotonic() + 60
    while sum("up " in line.text for line in run.logs()) < 2:
        assert time.monotonic() < deadline, list(run.logs())
        time.sleep(0.2)
    cluster.run("scancel", "--batch", "--signal=USR1", job_id(run))
    status = run.wait(timeout=60, poll=0.5)
    assert status.state is RunState.FAILED and status.details["exit_code"] == "124:0", status
    assert "stopped ahead of limits.max_runtime" in status.message and status.cause is Cause.LIMIT
    texts = sorted(line.text for line in run.logs() if line.text.startswith("checkpointed"))
    assert texts == ["checkpointed 0", "checkpointed 1"]


def test_every_process_gets_the_contract_and_the_secret_which_is_written_nowhere(
    cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One srun task per process on 2 nodes × 2: ranks from SLURM_*, the runtime contract, and a secret read
    from the submitting shell, which reaches every process through sbatch's environment only."""
    secret = "s3cr3t value with 'quotes' and spaces"
    monkeypatch.setenv("TEST_API_TOKEN", secret)
    probe = (
        "import hashlib, json, os; keys = [k for k in os.environ if k.startswith(('CLOUDDDP_', 'RANK', "
        "'LOCAL_', 'WORLD', 'MASTER_'))]; print(json.dumps({**{k: os.environ[k] for k in keys}, "
        "'token': hashlib.sha256(os.environ['API_TOKEN'].encode()).hexdigest()}))"
    )
    spec = tmp_path / "job.yaml"
    spec.write_text(f"""name: secret-probe
code: {{dir: {FIXTURES / "tinyjob"}, command: [{sys.executable}, -c, {json.dumps(probe)}]}}
resources: {{nodes: 2, processes_per_node: 2}}
env:
  PLAIN: visible
  API_TOKEN: {{from_env: TEST_API_TOKEN, secret: true}}
slurm: {{launch: srun, python: {sys.executable}, kill_wait: 5, status_every: 1}}
""")
    run = Job.load(spec).submit("slurm", poll_seconds=0.2)
    status = run.wait(timeout=60, poll=0.5)
    assert status.state is RunState.SUCCEEDED, status
    seen = {line.source: json.loads(line.text) for line in run.logs() if line.text.startswith("{")}
    assert sorted(seen) == ["node0/rank0", "node0/rank1", "node1/rank2", "node1/rank3"], seen
    for source, env in seen.items():
        rank = int(source[-1])
        assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == (
            str(rank),
            str(rank % 2),
            "4",
            "2",
        )
        assert env["MASTER_ADDR"] == "127.0.0.1" and env["CLOUDDDP_RUN_ID"] == run.run_id
        assert env["CLOUDDDP_BACKEND"] == "slurm" and env["CLOUDDDP_SIGTERM_GRACE"] == "5"
        assert env["token"] == hashlib.sha256(secret.encode()).hexdigest()
    stored = [p for p in [*(home() / "slurm").rglob("*"), *home().glob("runs.db*")] if p.is_file()]
    assert stored and not [p for p in stored if secret.encode() in p.read_bytes()]
    script = (Path(status.details["run_dir"]) / "job.sbatch").read_text()
    assert "export PLAIN=visible" in script and "# API_TOKEN: from the submitting shell or a secret" in script


def test_a_failed_rank_is_named_with_its_node_and_the_tail_of_its_output(cluster: SlurmCluster) -> None:
    run = submit(
        FIXTURES / "tinyjob" / "job.yaml",
        "resources.nodes=2",
        "slurm.launch=srun",
        "code.args=[--epochs, '3', --sleep, '0.05', --fail-rank, '1']",
    )
    status = run.wait(timeout=90, poll=0.5)
    assert status.state is RunState.FAILED and status.details["exit_code"] != "0:0", status
    assert status.message == "node node2 (rank 1) failed: exited with exit code 3", status.message
    assert status.cause is Cause.USER_ERROR
    assert any("boom: this rank fails on purpose" in line for line in status.details["failure"]["log_tail"])
    shown = cli("status", run.run_id)
    assert "node node2 (rank 1) failed" in shown.stdout and "boom" in shown.stdout, shown.stdout + shown.stderr


def test_doctor_checks_the_cluster_and_a_retried_launch_finds_its_job(cluster: SlurmCluster, tmp_path: Path) -> None:
    told = cli("doctor", str(FIXTURES / "tinyjob" / "job.yaml"), "-b", "slurm")
    assert told.returncode == 2, told.stdout + told.stderr
    assert "the cluster gives KillWait 5 s; the script is told 30 s" in told.stdout, told.stdout
    assert "fix: set slurm.kill_wait: 5" in told.stdout and "Slurm reachable" in told.stdout
    fixed = cli("doctor", str(FIXTURES / "tinyjob" / "job.yaml"), "-b", "slurm", "-o", "slurm.kill_wait=5")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # a working folder others may write in: they could change what the jobs run
    open_to_all = cli(
        "doctor",
        str(FIXTURES / "tinyjob" / "job.yaml"),
        "-b",
        "slurm",
        "-o",
        "slurm.kill_wait=5",
        "-o",
        f"slurm.workdir={shared}",
    )
    said = " ".join(open_to_all.stdout.split())
    assert open_to_all.returncode == 2 and "working folder yours alone" in said, said
    assert "others may write in it" in said and f"chmod go-w {shared}" in said, said

    job = Job.load(
        FIXTURES / "tinyjob" / "job.yaml",
        [*ON_CLUSTER, "slurm.launch=srun", "code.args=[]", "code.command=[bash, -c, 'echo once']"],
    )
    backend = get_backend("slurm", poll_seconds=0.2)
    plan = backend.render(job.spec)
    first = backend.launch(plan, checks=False)
    again = backend.launch(plan, checks=False)  # e.g. after the first answer was lost on the way back
    assert first == again == plan.request.run_id
    assert cluster.run("squeue", "-h", "-t", "all", f"--name={first}", "-o", "%i").stdout.split() == [
        backend.status(first).details["job_id"]
    ]
    assert Run(first, backend).wait(timeout=60, poll=0.3).state is RunState.SUCCEEDED
    assert [line.text for line in backend.logs(first) if line.primary] == ["once"]


@pytest.fixture(scope="module")
def login_node(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    """A real sshd on 127.0.0.1 whose sessions see the test cluster, as a login node's shell does."""
    try:
        with ssh_server(tmp_path_factory.mktemp("sshd"), {"SLURM_CONF": str(slurm_cluster.conf)}) as server:
            yield server
    except SshUnavailable as e:
        rig_unavailable(f"no sshd to stand in for a login node, so the ssh path is not tested here: {e}")


def test_through_ssh_to_a_login_node_the_same_verbs_work(
    cluster: SlurmCluster, login_node: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """slurm.login_host: every command (upload, sbatch with the secret on stdin, squeue, scontrol, log reads,
    scancel) goes through ssh; this process has no SLURM_CONF, so a command run here would fail."""
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setenv("TEST_API_TOKEN", "over-ssh-secret")
    workdir = tmp_path / "shared"
    remote = [
        f"slurm.login_host={login_node.host}",
        f"slurm.ssh_options={json.dumps(list(login_node.options))}",
        f"slurm.workdir={workdir}",
        "slurm.kill_wait=5",
        "slurm.status_every=1",
        "slurm.launch=srun",
        f"slurm.python={sys.executable}",  # rank 0's task hosts the store with it
        "resources.nodes=2",
        "env={API_TOKEN: {from_env: TEST_API_TOKEN, secret: true}}",
        "code.args=[]",
    ]
    command = "code.command=[bash, -c, 'echo \"on $SLURMD_NODENAME token ${#API_TOKEN}\"; sleep \"$0\"', '{}']"
    job = Job.load(FIXTURES / "tinyjob" / "job.yaml", [*remote, command.replace("{}", "0")])
    run = job.submit("slurm", poll_seconds=0.2)
    status = run.wait(timeout=60, poll=0.3)
    assert status.state is RunState.SUCCEEDED, status
    assert sorted((line.source, line.text) for line in run.logs() if line.text.startswith("on ")) == [
        ("node0/rank0", f"on node1 token {len('over-ssh-secret')}"),
        ("node1/rank1", f"on node2 token {len('over-ssh-secret')}"),
    ]
    assert [p.name.endswith(".tar.gz") for p in (workdir / "code").iterdir()] == [True]
    longer = Job.load(FIXTURES / "tinyjob" / "job.yaml", [*remote, command.replace("{}", "600")]).submit("slurm")
    deadline = time.monotonic() + 60
    while longer.status().state is not RunState.RUNNING:
        assert time.monotonic() < deadline, longer.status()
        time.sleep(0.2)
    assert longer.backend.cancel(longer.run_id) is True
    assert (longer.status().state, longer.status().cause) == (RunState.CANCELLED, Cause.CANCELLED)
    Shell(login_node.host, login_node.options).close()  # the shared ssh connection ends with the test


def test_the_jobs_requirements_are_installed_on_the_shared_filesystem_and_shared(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    """Two jobs with the same requirements: the first submit builds the environment, the second finds it (its
    sha256 checked), and both jobs run in it."""
    code = tmp_path / "code"
    (code / "wheels").mkdir(parents=True)
    wheel(code / "wheels")
    (code / "train.py").write_text(
        "import json, os, rehearsal_dep\n"
        "open(os.path.join(os.environ['CLOUDDDP_MODEL_DIR'], 'dep.json'), 'w').write("
        "json.dumps([rehearsal_dep.VALUE, rehearsal_dep.__file__]))\n"
    )
    spec = tmp_path / "job.yaml"
    spec.write_text(
        json.dumps(
            {
                "name": "deps",
                "code": {
                    "dir": str(code),
                    "requirements": ["--no-index", "./wheels/rehearsal_dep-1.0-py3-none-any.whl"],
                },
                "slurm": {"launch": "srun"},
            }
        )
    )
    runs = [submit(spec) for _ in range(2)]
    for run in runs:
        status = run.wait(timeout=120, poll=0.5)
        assert status.state is RunState.SUCCEEDED, (status, [line.text for line in run.logs()])
        value, where = json.loads((Path(status.details["run_dir"]) / "outputs" / "dep.json").read_text())
        assert value == "from requirements.txt" and where.startswith(str(home() / "slurm" / "envs")), where
    envs = home() / "slurm" / "envs"
    links = [p for p in envs.iterdir() if p.is_symlink()]
    assert len(links) == 1 and (links[0] / ".cloudddp-env").is_file()
    built = [p for p in envs.iterdir() if p.is_dir() and not p.is_symlink()]
    assert len(built) == 1, built
