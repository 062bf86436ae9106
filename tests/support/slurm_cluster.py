"""A real two-node Slurm cluster on this machine: its own munged, one slurmctld and two slurmd.

Debian's Slurm 22.05 daemons run in the foreground as children of the test process, on free ports on
127.0.0.1, with everything (munge key and socket, state, spool, logs, pid files, slurm.conf) in one
temporary folder. Nothing depends on a system munged or /etc/slurm. ``node1`` and ``node2`` are two
slurmd on the same host, each with its own port: only Slurm knows their address (``NodeAddr``).

Tuned for tests (each setting below says why): a node is declared dead ~11 s after its slurmd stops
answering (~5 min by default), a requeued job may start again 6 s later (~2 min by default), and finished
jobs are recorded in a jobcomp/filetxt file because there is no slurmdbd (``sacct`` alone answers
"accounting storage is disabled"; ``sacct --completion`` reads that file). See tests/support/SLURM.md.

Configured as shared clusters are: preemption with a grace time (partition ``spot``, preempted by jobs of
``urgent``), a partition with a short time limit (``short``), node data private to users (``PrivateData=nodes``),
tasks bound to their CPUs (``task/affinity``, ``autobind=cores``), and an unprivileged user for the tests'
jobs (:meth:`SlurmCluster.user`). The cluster's folder may be entered by every user.

Stopping cancels this cluster's jobs, stops the daemons it started by pid, then kills any process still
carrying this cluster's slurm.conf path or node marker in its environment (job steps, tasks): only
processes this cluster started. Should the test process die first, its watchdog (``watchdog.py``) ends the same
processes: each daemon gets SIGKILL when its parent dies (``PR_SET_PDEATHSIG``), and the watchdog holds their
pids and both environment entries.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import watchdog
from tests.support.ports import free_ports

SBIN = ("/usr/sbin", "/sbin")
NEEDED = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "srun", "sinfo", "squeue", "scontrol", "scancel")
NODE_NAMES = ("node1", "node2")
TERMINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
}
SPANK_SOURCE = Path(__file__).parent / "spank" / "cddp_tag.c"
SPANK_OPTION = "--cddp-tag"
"""The option the test SPANK plugin adds to sbatch; a job given ``--cddp-tag=VALUE`` has ``CDDP_TAG=VALUE``."""
NODE_MARKER = "CLOUDDDP_TEST_SLURM_NODE"  # set on each slurmd; its job steps inherit it
SPOT, URGENT, SHORT = "spot", "urgent", "short"
GRACE_TIME = 60
"""spot's GraceTime: a preempted job's tasks get SIGTERM, and Slurm requeues the job this many seconds later."""
SHORT_MINUTES = 1
"""short's MaxTime (minutes)."""
_OUTER_SLURM = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "SQUEUE_", "SINFO_", "SCONTROL_")  # if pytest runs in a job
_PAIR = re.compile(r"(\S+?)=(.*?)(?= \S+?=|$)")


class SlurmUnavailable(RuntimeError):
    """The cluster cannot run here; the message says why (tests skip with it)."""


def which(tool: str) -> str | None:
    """A tool on PATH or in /usr/sbin (daemons live there; a non-login PATH often lacks it)."""
    return shutil.which(tool, path=os.pathsep.join([os.environ.get("PATH", ""), *SBIN]))


def unavailable_reason() -> str | None:
    """Why this machine cannot run the cluster, or None."""
    missing = [t for t in NEEDED if which(t) is None]
    if missing:
        return (
            f"Slurm/munge not installed ({', '.join(missing)} missing): `make system-deps` installs slurm-wlm and munge"
        )
    if os.geteuid() != 0:
        return "slurmd must run as root to start jobs (this test run is not root)"
    return None


def parse_pairs(line: str) -> dict[str, str]:
    """``Key=Value Key2=Value two`` (scontrol -o, jobcomp/filetxt) as a dict; values may hold spaces."""
    return {m.group(1): m.group(2) for m in _PAIR.finditer(line.strip())}


def build_spank(root: Path) -> str | None:
    """Build the test SPANK plugin and write ``root``/plugstack.conf loading it; why it could not be, or None.
    Without it plugstack.conf is empty (no plugin, as on a cluster without any)."""
    plugstack = root / "plugstack.conf"
    plugstack.write_text("")
    gcc = shutil.which("gcc")
    if gcc is None:
        return "no gcc to build the test SPANK plugin: `make system-deps` installs gcc"
    if not Path("/usr/include/slurm/spank.h").exists():
        return "no spank.h to build the test SPANK plugin: `make system-deps` installs libslurm-dev"
    built = subprocess.run(
        [gcc, "-shared", "-fPIC", "-Wall", "-Werror", "-o", str(root / "cddp_tag.so"), str(SPANK_SOURCE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if built.returncode != 0:
        return f"the test SPANK plugin did not build: {built.stderr.strip()[-500:]}"
    plugstack.write_text(f"required {root}/cddp_tag.so\n")
    return None


def render_conf(
    root: Path, host: str, ctld_port: int, node_ports: dict[str, int], *, name: str = "cddptest", extra: str = ""
) -> str:
    """slurm.conf for node1/node2 on 127.0.0.1; every path under ``root`` but munge's socket where another
    cluster's munged serves this one too (``extra`` lines say so, and how to reach accounting)."""
    nodes = "\n".join(
        f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs=2 RealMemory=1000 State=UNKNOWN"
        for name, port in node_ports.items()
    )
    return f"""\
ClusterName={name}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# Our own munged's socket. cred_expire also sets how long a requeued job waits before it may start
# again (cred_expire + 1 s; default 120 s, least 5).
AuthInfo=socket={root}/munge/munge.socket,cred_expire=5
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
# As most clusters: each task is bound to its own cores (a task's affinity holds exactly its --cpus-per-task CPUs).
TaskPlugin=task/affinity
TaskPluginParam=autobind=cores
# As most shared clusters: node data is the administrators' (`scontrol show node` is refused to other users).
PrivateData=nodes
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/backfill
# Schedule at submit without the 3 s batching delay; a requeued job is picked up within a second.
SchedulerParameters=batch_sched_delay=0,bf_interval=1,sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Both "nodes" claim 2 CPUs of the same host, whatever it has.
SlurmdParameters=config_overrides
# Pings every SlurmdTimeout/3 s; a node unanswered for SlurmdTimeout s goes DOWN (default 300);
# it rejoins when slurmd registers.
SlurmdTimeout=5
# RPC timeout; a dead slurmd is noticed after ~SlurmdTimeout + 2 x MessageTimeout (~10 s here, ~5 min by default).
MessageTimeout=3
ReturnToService=2
# SIGTERM, then SIGKILL this many seconds later (cancel, requeue, time limit; default 30 s).
KillWait=5
# No slurmdbd: finished jobs go to a text file (sacct --completion reads it) and stay in slurmctld's
# memory (scontrol show job) for MinJobAge seconds.
JobCompType=jobcomp/filetxt
JobCompLoc={root}/jobcomp.txt
MinJobAge=600
# SPANK plugins: the test one (build_spank), not the system's /etc/slurm/plugstack.conf.
PlugStackConfig={root}/plugstack.conf
# Preemption as shared GPU clusters have it: a job of a higher PriorityTier partition (urgent) preempts jobs of
# the preemptible one (spot), which get SIGTERM and GraceTime seconds before Slurm requeues them.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=OFF
PartitionName={SPOT} Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime={GRACE_TIME}
PartitionName={URGENT} Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
# A partition whose time limit is shorter than a long training: it runs as a chain of allocations.
PartitionName={SHORT} Nodes=ALL MaxTime={SHORT_MINUTES} State=UP PriorityTier=1 PreemptMode=OFF
{extra}"""


@dataclass(frozen=True)
class ClusterUser:
    """An unprivileged user who reaches the cluster as on a login node: Slurm's commands on PATH, SLURM_CONF set."""

    name: str
    uid: int
    gid: int
    home: Path
    conf: Path
    python: str
    """An interpreter this user may run, with the test interpreter's packages (torch, cloudddp's dependencies)."""

    def env(self, **extra: str) -> dict[str, str]:
        """The user's whole environment: nothing of the test process's leaks into it but what is named."""
        return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(self.home), "SLURM_CONF": str(self.conf), **extra}

    def run(
        self, argv: list[str], *, timeout: float = 120, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``argv`` as this user (its own uid and gid, no supplementary groups), from its home folder."""
        return subprocess.run(
            ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", *argv],
            cwd=cwd or self.home,
            env=env or self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


_LIBC = ctypes.CDLL(None)  # loaded here: the child below runs between fork and exec, where nothing may be imported


def _die_with_parent() -> None:
    """Runs in the child before exec: a daemon gets SIGKILL if the test process dies without stopping it."""
    _LIBC.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class SlurmCluster:
    """A running cluster. ``env`` is what Slurm's commands need (SLURM_CONF; munge's socket is in its AuthInfo)."""

    root: Path
    conf: Path
    munge_socket: Path
    nodes: dict[str, str]  # name -> address
    node_ports: dict[str, int]
    ctld_port: int
    start_seconds: float = 0.0
    shared_munge: bool = False
    """Another's munged serves this cluster (clusters of one accounting database share a key): none started."""
    spank_unavailable: str | None = None
    """Why the test SPANK plugin (``--cddp-tag``) is not loaded, or None when it is."""
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    @property
    def jobcomp_file(self) -> Path:
        return self.root / "jobcomp.txt"

    def command_env(self) -> dict[str, str]:
        """This process's environment for Slurm's commands and daemons, minus any outer Slurm job's variables."""
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(_OUTER_SLURM)}
        return {**inherited, **self.env, "PATH": os.pathsep.join([os.environ.get("PATH", ""), *SBIN])}

    # -- commands -------------------------------------------------------------------------------
    def run(
        self,
        *argv: str,
        timeout: float = 30,
        check: bool = True,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """A Slurm command against this cluster."""
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, cwd=cwd, env=self.command_env(), check=False
        )
        if check and done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip() or done.stdout.strip()}"
            )
        return done

    def sbatch(self, *args: str, cwd: Path) -> str:
        """Submit; the job id (``--parsable`` prints ``id`` or ``id;cluster``)."""
        return self.run("sbatch", "--parsable", *args, cwd=cwd).stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job`` as a dict (kept MinJobAge seconds after the job ends)."""
        return parse_pairs(self.run("scontrol", "-o", "show", "job", job_id).stdout)

    def node(self, name: str) -> dict[str, str]:
        return parse_pairs(self.run("scontrol", "-o", "show", "node", name).stdout)

    def completions(self, job_id: str) -> list[dict[str, str]]:
        """The job's jobcomp/filetxt records, oldest first: one per run (a requeued run's says PENDING or NODE_FAIL)."""
        if not self.jobcomp_file.exists():
            return []
        records = [parse_pairs(line) for line in self.jobcomp_file.read_text().splitlines()]
        return [r for r in records if r.get("JobId") == job_id]

    def completion(self, job_id: str) -> dict[str, str] | None:
        """The record of the job's latest run that ended, or None."""
        runs = self.completions(job_id)
        return runs[-1] if runs else None

    def wait_job(self, job_id: str, states: set[str] | None = None, timeout: float = 30) -> dict[str, str]:
        """Poll until the job's state is one of ``states`` (default: any terminal state)."""
        wanted = states or TERMINAL
        deadline = time.monotonic() + timeout
        while True:
            info = self.job(job_id)
            if info.get("JobState") in wanted:
                return info
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"job {job_id} still {info.get('JobState')} ({info.get('Reason')}) after {timeout} s"
                )
            time.sleep(0.2)

    def wait_nodes(self, state: str = "idle", names: tuple[str, ...] | None = None, timeout: float = 30) -> None:
        """Poll ``sinfo`` until every named node (default: all) is in ``state``."""
        names = names or tuple(self.nodes)
        deadline = time.monotonic() + timeout
        while True:
            done = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False)
            states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
            if all(states.get(n) == state for n in names):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"nodes not {state} after {timeout} s: {states or done.stderr.strip()}")
            self._check_alive()
            time.sleep(0.1)

    def user(self) -> ClusterUser:
        """An unprivileged user of this cluster (created once for the tests, see support/users.py), with a home
        folder of its own in the cluster's folder: a user as on a real cluster, for whom ``PrivateData=nodes``
        hides node data. Needs root, as the cluster does."""
        from tests.support.users import other_user

        other = other_user()
        home = self.root / "home" / other.name
        if not home.is_dir():
            home.mkdir(parents=True)
            os.chown(home, other.uid, other.gid)
            home.chmod(0o700)
        user = ClusterUser(other.name, other.uid, other.gid, home, self.conf, sys.executable)
        return dataclasses.replace(user, python=self._python_for(user))

    def _python_for(self, user: ClusterUser) -> str:
        """An interpreter with this one's packages that ``user`` may run: this one where it can; else (it sits in
        a folder only its owner may enter, as pyenv's under /root) a venv of the system's Python of the same
        version that sees this interpreter's packages (as the Slurm backend's requirements environments do)."""
        probe = [sys.executable, "-c", "import torch"]
        if user.run(["bash", "-c", 'exec "$@"', "probe", *probe]).returncode == 0:
            return sys.executable
        venv = self.root / "python-for-users"
        python = venv / "bin" / "python"
        if not python.exists():
            system = shutil.which(f"python{sys.version_info.major}.{sys.version_info.minor}", path="/usr/bin:/bin")
            if system is None:
                raise SlurmUnavailable(
                    f"{sys.executable} cannot be run by other users, and there is no system "
                    f"python{sys.version_info.major}.{sys.version_info.minor} to give them its packages"
                )
            subprocess.run([system, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
            site = subprocess.run(
                [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                capture_output=True,
                text=True,
                check=True,
                timeout=60,
            ).stdout.strip()
            ours = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
            Path(site, "_cloudddp_test_packages.pth").write_text(
                "import site; " + "; ".join(f"site.addsitedir({p!r})" for p in ours) + "\n"
            )
        return str(python)

    # -- node failure ---------------------------------------------------------------------------
    def kill_node(self, name: str) -> None:
        """A node crash: SIGKILL its slurmd and every job process running on it (steps and tasks)."""
        proc = self._procs.pop(f"slurmd-{name}")
        marker = f"{NODE_MARKER}={self.root}/{name}"
        victims = watchdog.with_descendants({proc.pid} | watchdog.pids_with_env(marker))
        for pid in victims:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=10)
        watchdog.release(proc.pid)

    def restore_nodes(self, timeout: float = 60) -> None:
        """Every node back up and idle, whatever a test did to them (its slurmd killed, the node left down):
        a test's finalizer calls it, so one failed test cannot leave the next without a node."""
        for name in self.nodes:
            if f"slurmd-{name}" not in self._procs:
                self.start_node(name)
        down = [
            n for n in self.nodes if "DOWN" in self.node(n).get("State", "") or "DRAIN" in self.node(n).get("State", "")
        ]
        for name in down:
            self.run("scontrol", "update", f"nodename={name}", "state=resume", check=False)
        self.wait_nodes("idle", timeout=timeout)

    def start_node(self, name: str) -> None:
        """Start (again) the slurmd of ``name``; with ReturnToService=2 the node rejoins when it registers."""
        self._procs[f"slurmd-{name}"] = self._spawn(
            f"slurmd-{name}",
            ["slurmd", "-D", "-f", str(self.conf), "-N", name],
            extra_env={NODE_MARKER: f"{self.root}/{name}"},
        )

    # -- life cycle -----------------------------------------------------------------------------
    def _spawn(self, label: str, argv: list[str], extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        out = open(self.root / "log" / f"{label}.out", "ab")  # noqa: SIM115 - the child keeps it
        try:
            proc = subprocess.Popen(
                [which(argv[0]) or argv[0], *argv[1:]],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - one libc call, no locks taken
                env={**self.command_env(), **(extra_env or {})},
            )
        finally:
            out.close()
        watchdog.guard(proc.pid)
        return proc

    def _check_alive(self) -> None:
        for label, proc in self._procs.items():
            if proc.poll() is not None:
                raise SlurmUnavailable(f"{label} exited with {proc.returncode}: {self.log_tail(label)}")

    def log_tail(self, label: str, lines: int = 5) -> str:
        """The last lines of a daemon's log (``slurmctld``, ``slurmd-node1``, ``munged``), for messages."""
        texts = []
        for path in (self.root / "log" / f"{label}.log", self.root / "log" / f"{label}.out"):
            if path.exists():
                texts += path.read_text(errors="replace").splitlines()[-lines:]
        return " | ".join(texts) or "(no log)"

    def start(self) -> None:
        began = time.monotonic()
        for sub in ("munge", "log", "state", "spool", "run"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "munge").chmod(0o755)  # munged wants its socket's folder reachable by all
        for entry in self._markers:
            watchdog.guard_environ(entry)
        if not self.shared_munge:
            self._start_munge()
        self._procs["slurmctld"] = self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        for name in self.nodes:
            self.start_node(name)
        self.wait_nodes("idle", timeout=30)
        self.start_seconds = time.monotonic() - began

    def _start_munge(self) -> None:
        key = self.root / "munge" / "munge.key"
        subprocess.run(
            [which("mungekey") or "mungekey", "--create", f"--keyfile={key}"],
            check=True,
            capture_output=True,
            timeout=30,
        )
        self._procs["munged"] = self._spawn(
            "munged",
            [
                "munged",
                "--foreground",
                "--force",
                f"--key-file={key}",
                f"--socket={self.munge_socket}",
                f"--pid-file={self.root}/run/munged.pid",
                f"--log-file={self.root}/log/munged.log",
                f"--seed-file={self.root}/munge/munged.seed",
            ],
        )
        _wait_for(self.munge_socket.exists, 10, "munged socket", self._check_alive)

    def stop(self) -> None:
        """Cancel our jobs, stop our daemons by pid, then kill what is left of our jobs' processes."""
        if "slurmctld" in self._procs and self._procs["slurmctld"].poll() is None:
            jobs = self.run("squeue", "-h", "-o", "%i", check=False, timeout=10).stdout.split()
            if jobs:
                self.run("scancel", *jobs, check=False, timeout=10)
                with suppress(TimeoutError, RuntimeError, subprocess.TimeoutExpired):
                    _wait_for(lambda: not self.run("squeue", "-h", check=False, timeout=5).stdout.strip(), 10, "jobs")
        for label in [k for k in self._procs if k.startswith("slurmd-")] + ["slurmctld", "munged"]:
            proc = self._procs.pop(label, None)
            if proc is None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            watchdog.release(proc.pid)
        leftovers = set().union(*(watchdog.pids_with_env(entry) for entry in self._markers))
        for pid in watchdog.with_descendants(leftovers):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for entry in self._markers:
            watchdog.release_environ(entry)

    @property
    def _markers(self) -> tuple[str, str]:
        """The environment entries of this cluster's processes: its jobs' (``SLURM_CONF``), its nodes' (the marker)."""
        return f"SLURM_CONF={self.conf}", f"{NODE_MARKER}={self.root}/"


def _wait_for(ready: Callable[[], bool], timeout: float, what: str, check: Callable[[], None] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if check is not None:
            check()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready after {timeout} s")
        time.sleep(0.05)


def start_cluster(
    root: Path, *, name: str = "cddptest", extra: str = "", munge_socket: Path | None = None
) -> SlurmCluster:
    """Write slurm.conf under ``root`` and start munged (unless ``munge_socket`` is another's), slurmctld and both
    slurmd; raises SlurmUnavailable. ``name`` and ``extra`` as :func:`render_conf` takes them."""
    reason = unavailable_reason()
    if reason:
        raise SlurmUnavailable(reason)
    ctld_port, *ports = free_ports(1 + len(NODE_NAMES))
    node_ports = dict(zip(NODE_NAMES, ports, strict=True))
    conf = root / "slurm.conf"
    host = socket.gethostname().split(".")[0]
    spank_unavailable = build_spank(root)
    socket_path = munge_socket or root / "munge" / "munge.socket"
    text = render_conf(root, host, ctld_port, node_ports, name=name, extra=extra)
    conf.write_text(text.replace(f"{root}/munge/munge.socket", str(socket_path)))
    cluster = SlurmCluster(
        spank_unavailable=spank_unavailable,
        shared_munge=munge_socket is not None,
        root=root,
        conf=conf,
        munge_socket=socket_path,
        nodes={name: "127.0.0.1" for name in NODE_NAMES},
        node_ports=node_ports,
        ctld_port=ctld_port,
    )
    try:
        cluster.start()
    except (SlurmUnavailable, TimeoutError, OSError, subprocess.SubprocessError) as e:
        cluster.stop()
        raise SlurmUnavailable(
            f"the Slurm daemons did not start: {e}; slurmctld log: {cluster.log_tail('slurmctld')}"
        ) from e
    return cluster


def cluster_fixture(root: Path | None = None) -> Iterator[SlurmCluster]:
    """Body of a pytest fixture: yields the running cluster; when it cannot run, skips with the reason (on CI:
    fails with it). Without ``root``, its folder is a new one in the system's temporary folder that every user
    may enter (pytest's own is its owner's alone): an unprivileged user's commands need slurm.conf and munge's
    socket. That folder is removed afterwards."""
    from tests.support.rigs import rig_unavailable

    own = root is None
    if root is None:
        root = Path(tempfile.mkdtemp(prefix="cloudddp-slurm-"))
        root.chmod(0o755)
    try:
        try:
            cluster = start_cluster(root)
        except SlurmUnavailable as e:
            rig_unavailable(f"no Slurm cluster on this machine, so the Slurm tests cannot run: {e}")
        try:
            yield cluster
        finally:
            cluster.stop()
    finally:
        if own:
            shutil.rmtree(root, ignore_errors=True)
