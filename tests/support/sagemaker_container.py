"""Rehearse a SageMaker training job here: AWS's own container code runs the request cloudddp sent to moto.

moto stores a CreateTrainingJob and runs nothing. This rig takes the request exactly as cloudddp sent it
(:func:`record_create_training_job` hooks the boto3 session, because moto's DescribeTrainingJob drops
``Environment`` and replaces ``MetricDefinitions``) and does, for each host ``algo-1`` ... ``algo-N``,
what SageMaker does with it:

- writes ``/opt/ml/input/config/hyperparameters.json`` (the request's HyperParameters: a JSON object
  of strings), ``resourceconfig.json`` and ``inputdataconfig.json``;
- downloads every S3Prefix channel from moto's S3 into ``/opt/ml/input/data/<channel>`` and restores
  ``CheckpointConfig.S3Uri`` into ``CheckpointConfig.LocalPath``;
- starts the container as SageMaker does: PID 1 runs the request's ``ContainerEntrypoint`` +
  ``ContainerArguments`` when it has them, else the image's own ENTRYPOINT with SageMaker's argument
  (``bash -m start_with_right_hostname.sh train``, the image's real script, ``image/``), which runs
  ``train`` from AWS's ``sagemaker-training`` toolkit at the version the image carries (``toolkit``:
  5.1.1 for the AL2023 images, see ``image/toolkits.json``), with the PyTorch image's
  ``SAGEMAKER_TRAINING_MODULE`` (``sagemaker_pytorch_container.training:main``), the request's
  ``Environment`` and the platform's variables. The toolkit itself downloads
  ``sagemaker_submit_directory`` from moto, installs ``requirements.txt`` and starts the runner the
  hyperparameters ask for (torchrun for ``sagemaker_torch_distributed_enabled``);
- ``image``: ``dlc`` (the PyTorch DLC, above), ``byoc`` (an image built the way AWS documents for your own
  container: ``pip install sagemaker-training``, so ``train`` is on PATH, but no DLC start script and no
  ``SAGEMAKER_TRAINING_MODULE``) or ``python`` (a plain Python image with torch: no toolkit command, no start
  script); the toolkit's package stays importable in every kind (the hosts' Python layers this venv), which
  only the DLC kind's entry uses;
- under ``EnableNetworkIsolation`` gives the containers no way out of their network and no credentials,
  while the platform's own steps (channels, checkpoints) still reach S3, as on SageMaker;
- ``stop_on``: once a host's log shows that text, sends SIGTERM to every host's PID 1, as StopTrainingJob,
  a spot interruption or MaxRuntime do, and SIGKILL after ``grace`` seconds;
- afterwards uploads each host's checkpoints to ``CheckpointConfig.S3Uri`` (SageMaker syncs them while
  the job runs; the rehearsal syncs once, at the end).

Each host runs in its own namespaces (:mod:`tests.support.namespaces`), so ``/opt/ml`` and the
``algo-N`` names are real for the toolkit and the script, and nothing outside the sandbox changes;
``SAGEMAKER_BASE_DIR`` is therefore not needed (and not set: the real container does not set it).
Each host has its own Python (a venv in the sandbox layered over this interpreter's packages), so
``requirements.txt`` installs there, never into the shared venv.

What is not SageMaker: static test credentials instead of the role's, CPU instead of GPUs, and, where
the toolkit cannot run here, the patches listed in :attr:`Rehearsal.patches` (nothing in the request
under test is changed):

- ``gpus_per_host``: a stub ``nvidia-smi`` listing that many GPUs (the toolkit's only GPU probe), for
  rehearsing a GPU instance's process count on CPU;
- smddp: stub ``mpirun`` and ``smddprun`` record their command line and stop the job there (the smddp
  library is closed source and needs GPUs), and the toolkit's start of sshd (which mpirun uses to reach
  other hosts) is skipped: one host needs none.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from tests.support import namespaces, watchdog
from tests.support.cores import SHARED_CORES_ENV

GROUP = "homogeneousCluster"  # SageMaker's instance group name for a job without heterogeneous clusters
INTERFACE = "eth0"  # what SageMaker writes as network_interface_name
STUB_EXIT = 86  # exit status of the mpirun stub: the rehearsal stops at the runner's command line
FAIL_GRACE = 10.0  # seconds the other hosts get after one host failed
CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The PyTorch training image's own ENV (its Dockerfile); the toolkit's `train` reads the first.
DLC_ONLY_ENV = ("SAGEMAKER_TRAINING_MODULE", "DLC_CONTAINER_TYPE")
"""What only the DLC sets: an image with ``sagemaker-training`` alone has no framework module."""
IMAGE_KINDS = ("dlc", "byoc", "python")
IMAGE_ENV = {
    "SAGEMAKER_TRAINING_MODULE": "sagemaker_pytorch_container.training:main",
    "DLC_CONTAINER_TYPE": "training",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
    "PYTHONIOENCODING": "UTF-8",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
}
_INVOCATION = "Invoking script with the following command:"
IMAGE = Path(__file__).parent / "image"
# The image's ENTRYPOINT and the argument SageMaker gives it (image/toolkits.json names the sources).
IMAGE_ENTRY = ["bash", "-m", "start_with_right_hostname.sh", "train"]
TOOLKIT_DATA = json.loads((IMAGE / "toolkits.json").read_text())
TOOLKITS: list[str] = TOOLKIT_DATA["rehearse"]
TOOLKIT_CACHE = Path(__file__).resolve().parents[2] / ".cache" / "toolkits"


class RehearsalUnavailable(Exception):
    """This machine cannot host a rehearsal (the message says why)."""


def two_host_flags(rank: int, per_host: str) -> list[str]:
    """torchrun's flags as the toolkit starts host ``rank`` of two (algo-1 hosts the rendezvous on 7777)."""
    return [
        "--nnodes", "2", "--nproc_per_node", per_host, "--master_addr", "algo-1", "--master_port", "7777",
        "--node_rank", str(rank),
    ]  # fmt: skip


def installed_toolkit() -> str:
    from importlib.metadata import version

    return version("sagemaker-training")


def toolkit_folder(version: str) -> Path | None:
    """A folder holding ``sagemaker-training==version`` to put before this venv's packages (None: this venv's
    own is that version). Installed once from PyPI into ``.cache/toolkits`` (``make toolkits`` does it too)."""
    if version == installed_toolkit():
        return None
    folder = TOOLKIT_CACHE / f"sagemaker-training-{version}"
    TOOLKIT_CACHE.mkdir(parents=True, exist_ok=True)
    with open(TOOLKIT_CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / ".installed").is_file():
            shutil.rmtree(folder, ignore_errors=True)
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--no-deps",
                    "--target",
                    str(folder),
                    f"sagemaker-training=={version}",
                ],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                raise RehearsalUnavailable(f"cannot install sagemaker-training=={version}: {done.stderr[-500:]}")
            (folder / ".installed").write_text(version)
    return folder


def record_create_training_job(session: Any) -> list[dict[str, Any]]:
    """Every CreateTrainingJob request made through ``session`` (a boto3 Session), as its caller passed it."""
    sent: list[dict[str, Any]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        sent.append(json.loads(json.dumps(params)))

    session.events.register("provide-client-params.sagemaker.CreateTrainingJob", record)
    return sent


@dataclass(frozen=True)
class Aws:
    """Where the containers reach AWS (moto) and the stand-in credentials they use."""

    endpoint_url: str
    region: str
    access_key: str = "testing"
    secret_key: str = "testing"

    @property
    def port(self) -> int:
        port = urlparse(self.endpoint_url).port
        if urlparse(self.endpoint_url).hostname != "127.0.0.1" or port is None:
            raise ValueError(f"the rehearsal bridges 127.0.0.1:PORT endpoints only, not {self.endpoint_url}")
        return port

    def client(self, service: str) -> Any:
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.endpoint_url,
            region_name=self.region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
        )

    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
        }


@dataclass
class HostRun:
    name: str
    folder: Path  # everything of this host in the sandbox; its /opt/ml is folder / "opt-ml"
    returncode: int | None  # None: stopped by the rehearsal (time limit, or another host failed)
    log: str  # the container's stdout and stderr: what CloudWatch Logs would hold

    @property
    def opt_ml(self) -> Path:
        return self.folder / "opt-ml"

    @property
    def lines(self) -> list[str]:
        return self.log.splitlines()

    @property
    def failure(self) -> str | None:
        """What the toolkit wrote to /opt/ml/output/failure (SageMaker's FailureReason), if anything."""
        path = self.opt_ml / "output" / "failure"
        return path.read_text() if path.exists() else None

    def invocation(self) -> str:
        """The command line the toolkit logged for the user script (its runner's command, space-joined)."""
        lines = self.lines
        for i, line in enumerate(lines):
            if _INVOCATION in line:
                return next(rest for rest in lines[i + 1 :] if rest.strip()).strip()
        raise AssertionError(f"{self.name}: the toolkit logged no invocation\n{self.log[-3000:]}")

    def stub_calls(self, program: str) -> list[dict[str, Any]]:
        """Each call of a stub program (``mpirun``, ``smddprun``): its argv and environment."""
        path = self.folder / "stub-calls" / f"{program}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@dataclass
class Rehearsal:
    request: dict[str, Any]
    hosts: list[HostRun]
    seconds: float
    patches: list[str] = field(default_factory=list)
    toolkit: str = ""  # the sagemaker-training version the hosts ran

    def host(self, name: str) -> HostRun:
        return next(h for h in self.hosts if h.name == name)

    def metrics(self) -> dict[str, list[float]]:
        """What SageMaker's MetricDefinitions (from the request) extract from the hosts' logs, in order."""
        found: dict[str, list[float]] = {}
        for definition in self.request["AlgorithmSpecification"].get("MetricDefinitions", []):
            regex = re.compile(definition["Regex"])
            values = found.setdefault(definition["Name"], [])
            for host in self.hosts:
                for line in host.lines:
                    match = regex.search(line)
                    if match:
                        values.append(float(match.group(1)))
        return found


# -- the container's view --------------------------------------------------------------------------
def _decoded(value: str) -> Any:
    """A hyperparameter value as the toolkit reads it (JSON if it parses, else the string)."""
    try:
        return json.loads(value)
    except ValueError:
        return value


def _s3_location(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    return parsed.netloc, parsed.path.lstrip("/")


def _download_prefix(s3: Any, uri: str, folder: Path) -> None:
    """Every object under the S3 prefix ``uri``, at its path relative to the prefix (an object named by
    the whole prefix: under its own name)."""
    bucket, prefix = _s3_location(uri)
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            rel = item["Key"][len(prefix) :].lstrip("/") or item["Key"].rsplit("/", 1)[-1]
            target = folder / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, item["Key"], str(target))


def _upload_folder(s3: Any, folder: Path, uri: str) -> None:
    bucket, prefix = _s3_location(uri)
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        key = f"{prefix.rstrip('/')}/{path.relative_to(folder).as_posix()}"
        s3.upload_file(str(path), bucket, key)


def _checkpoint_folder(opt_ml: Path, checkpoint: dict[str, str]) -> Path:
    """CheckpointConfig.LocalPath in the host's sandbox (it must lie under /opt/ml, as cloudddp's does)."""
    local = checkpoint.get("LocalPath", "/opt/ml/checkpoints")
    if not local.startswith("/opt/ml/"):
        raise ValueError(f"CheckpointConfig.LocalPath {local!r}: the rehearsal maps paths under /opt/ml only")
    return opt_ml / local.removeprefix("/opt/ml/")


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _opt_ml(request: dict[str, Any], host: str, hosts: list[str], opt_ml: Path, s3: Any) -> None:
    """/opt/ml of one host before the container starts, as SageMaker prepares it."""
    resources = request["ResourceConfig"]
    config = opt_ml / "input" / "config"
    _write_json(config / "hyperparameters.json", request.get("HyperParameters", {}))
    _write_json(
        config / "resourceconfig.json",
        {
            "current_host": host,
            "current_instance_type": resources["InstanceType"],
            "current_group_name": GROUP,
            "hosts": hosts,
            "network_interface_name": INTERFACE,
            "instance_groups": [
                {"instance_group_name": GROUP, "instance_type": resources["InstanceType"], "hosts": hosts}
            ],
        },
    )
    default_mode = request["AlgorithmSpecification"].get("TrainingInputMode", "File")
    channels: dict[str, dict[str, str]] = {}
    for channel in request.get("InputDataConfig", []):
        source = channel["DataSource"]["S3DataSource"]
        if (
            source["S3DataType"] != "S3Prefix"
            or source.get("S3DataDistributionType", "FullyReplicated") != "FullyReplicated"
        ):
            raise ValueError(
                f"channel {channel['ChannelName']}: the rehearsal downloads FullyReplicated S3Prefix channels only"
            )
        channels[channel["ChannelName"]] = {
            "TrainingInputMode": channel.get("InputMode", default_mode),
            "S3DistributionType": "FullyReplicated",
            "RecordWrapperType": channel.get("RecordWrapperType", "None"),
            **({"ContentType": channel["ContentType"]} if "ContentType" in channel else {}),
        }
        _download_prefix(s3, source["S3Uri"], opt_ml / "input" / "data" / channel["ChannelName"])
    _write_json(config / "inputdataconfig.json", channels)
    for sub in ("model", "output/data", "code"):
        (opt_ml / sub).mkdir(parents=True, exist_ok=True)
    checkpoint = request.get("CheckpointConfig")
    if checkpoint:
        local = _checkpoint_folder(opt_ml, checkpoint)
        local.mkdir(parents=True, exist_ok=True)
        _download_prefix(s3, checkpoint["S3Uri"].rstrip("/") + "/", local)


# -- the container's Python and stand-ins ----------------------------------------------------------
def _script(path: Path, python: Path, body: str) -> None:
    path.write_text(f"#!{python}\n{body}")
    path.chmod(0o755)


def _container_python(folder: Path, patch_sshd: bool, toolkit: Path | None, image: str = "dlc") -> Path:
    """A venv in the sandbox layered over ``toolkit`` (a sagemaker-training version) and this interpreter's
    packages, with the image's ``train`` and ``torchrun`` commands and its entry script as ``image`` has them
    (see :func:`rehearse`); its bin folder."""
    venv = folder / "python"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    layers = [*([str(toolkit)] if toolkit else []), *sorted({sysconfig.get_paths()[k] for k in ("purelib", "platlib")})]
    (Path(site) / "_rehearsal_base.pth").write_text(
        "".join(f"import site; site.addsitedir({layer!r})\n" for layer in layers)
    )
    if image == "dlc":
        shutil.copy(IMAGE / "start_with_right_hostname.sh", venv / "bin")
    patch = (
        (
            "import sagemaker_training.smdataparallel as smdataparallel\n"
            "smdataparallel._start_sshd_daemon = lambda: None  # rehearsal: no sshd for one host\n"
        )
        if patch_sshd
        else ""
    )
    if image != "python":
        _script(
            venv / "bin" / "train",
            python,
            f"import sys\n{patch}from sagemaker_training.cli.train import main\nsys.exit(main())\n",
        )
    _script(venv / "bin" / "torchrun", python, "import sys\nfrom torch.distributed.run import main\nsys.exit(main())\n")
    return venv / "bin"


def _stubs(folder: Path, python: Path, gpus: int, smddp: bool) -> Path | None:
    if not gpus and not smddp:
        return None
    stubs = folder / "stubs"
    stubs.mkdir()
    if gpus:
        _script(
            stubs / "nvidia-smi",
            python,
            f"for i in range({gpus}):\n    print(f'GPU {{i}}: rehearsal stand-in (UUID: GPU-rehearsal-{{i}})')\n",
        )
    if smddp:
        calls = folder / "stub-calls"
        calls.mkdir()
        for program in ("mpirun", "smddprun"):
            _script(
                stubs / program,
                python,
                (
                    "import json, os, sys\n"
                    f"with open({str(calls / (program + '.jsonl'))!r}, 'a') as f:\n"
                    "    f.write(json.dumps({'argv': sys.argv, 'env': dict(os.environ)}) + '\\n')\n"
                    f"print('rehearsal: {program} stops the job here "
                    "(smddp needs its closed-source library and GPUs)')\n"
                    f"sys.exit({STUB_EXIT})\n"
                ),
            )
    return stubs


def _hosts_file(hosts: list[str]) -> str:
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    lines += [f"127.0.1.{i}\t{name}" for i, name in enumerate(hosts, 1)]
    return "\n".join(lines) + "\n"


# -- the rehearsal ---------------------------------------------------------------------------------
def _prepare_host(
    request: dict[str, Any],
    name: str,
    names: list[str],
    sandbox: Path,
    aws: Aws,
    s3: Any,
    *,
    gpus: int,
    smddp: bool,
    isolated: bool,
    toolkit: Path | None,
    short: Path,
    image: str = "dlc",
) -> Path:
    """The host's sandbox folder (its /opt/ml, Python, stubs) and the namespaces.host_argv config; the config.

    Its TMPDIR is ``short/<host>``, a link to the sandbox's ``tmp``: a socket's path must fit in 108 bytes, and a
    DataLoader worker hands tensors to its parent through a socket in TMPDIR (``AF_UNIX path too long`` under
    pytest's long folder names; SageMaker's containers have /tmp)."""
    folder = sandbox / name
    for sub in ("home", "tmp", "opt-view"):
        (folder / sub).mkdir(parents=True)
    (short / name).symlink_to(folder / "tmp")
    _opt_ml(request, name, names, folder / "opt-ml", s3)
    bin_dir = _container_python(folder, patch_sshd=smddp, toolkit=toolkit, image=image)
    stubs = _stubs(folder, bin_dir / "python", gpus, smddp)
    env = {
        "PATH": ":".join(filter(None, [str(stubs) if stubs else "", str(bin_dir), CONTAINER_PATH])),
        "HOME": str(folder / "home"),
        "TMPDIR": str(short / name),
        **(IMAGE_ENV if image == "dlc" else {k: v for k, v in IMAGE_ENV.items() if k not in DLC_ONLY_ENV}),
        **SHARED_CORES_ENV,  # the hosts share this machine's cores
        **{k: v for k, v in os.environ.items() if k == watchdog.MARK},  # they end with the test process
        "TRAINING_JOB_NAME": request["TrainingJobName"],
        "AWS_REGION": aws.region,
        **({} if isolated else aws.env()),
        **request.get("Environment", {}),
    }
    config = folder / "host.json"
    config.write_text(
        json.dumps(
            {
                "hostname": name,
                "etc_hosts": str(sandbox / "hosts"),
                "opt_ml": str(folder / "opt-ml"),
                "scratch": str(folder / "opt-view"),
                "cwd": "/",
                "argv": _pid1(request),
                "env": env,
            }
        )
    )
    return config


def _pid1(request: dict[str, Any]) -> list[str]:
    """What the container's PID 1 runs: the request's ContainerEntrypoint + ContainerArguments, else the
    image's ENTRYPOINT with SageMaker's ``train``."""
    spec = request["AlgorithmSpecification"]
    if "ContainerEntrypoint" in spec:
        return [*spec["ContainerEntrypoint"], *spec.get("ContainerArguments", [])]
    return [*IMAGE_ENTRY[:-1], *spec.get("ContainerArguments", IMAGE_ENTRY[-1:])]


def _pid1_of(host: subprocess.Popen[bytes]) -> int | None:
    """This machine's pid of a host's PID 1 (the child of its ``unshare --fork``)."""
    with contextlib.suppress(OSError, ValueError):
        children = Path(f"/proc/{host.pid}/task/{host.pid}/children").read_text().split()
        return int(children[0]) if children else None
    return None


@dataclass
class Stop:
    """A stop as SageMaker sends it: SIGTERM to every host's PID 1 once ``on`` shows in a log; SIGKILL after
    ``grace`` seconds."""

    on: str
    grace: float
    sent_at: float | None = None  # time.monotonic() of the SIGTERM


def _run_hosts(argvs: list[list[str]], logs: list[Path], deadline: float, stop: Stop | None = None) -> list[int | None]:
    """Start every host, wait for all; stop the rest (exit None) at the deadline, or FAIL_GRACE seconds
    after one host failed (SageMaker ends the job when one host fails), or ``stop.grace`` after a stop."""
    procs = []
    for argv, path in zip(argvs, logs, strict=True):
        with path.open("wb") as log:
            procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    failed_at = None
    while any([p.poll() is None for p in procs]):  # a list: poll every host, not just up to the first running
        now = time.monotonic()
        if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
            failed_at = now
        if stop and stop.sent_at is None and any(stop.on in path.read_text(errors="replace") for path in logs):
            for proc in procs:
                pid = _pid1_of(proc)
                if pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGTERM)
            stop.sent_at = now
        if now > deadline or (failed_at is not None and now > failed_at + FAIL_GRACE):
            break
        if stop and stop.sent_at is not None and now > stop.sent_at + stop.grace:
            break
        time.sleep(0.2)
    codes: list[int | None] = []
    for proc in procs:
        if proc.poll() is None:  # its PID namespace ends with it (namespaces.host_argv)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            codes.append(None)
        else:
            codes.append(proc.returncode)
    return codes


def rehearse(
    request: dict[str, Any],
    sandbox: Path,
    aws: Aws,
    *,
    gpus_per_host: int = 0,
    timeout: float = 240.0,
    toolkit: str | None = None,
    stop: Stop | None = None,
    image: str = "dlc",
) -> Rehearsal:
    """Run ``request`` (a CreateTrainingJob as sent) on this machine, one namespace-isolated host per
    instance, with ``sagemaker-training`` at ``toolkit`` (None: this venv's); returns when every host's
    container has exited or was stopped (see :func:`_run_hosts`)."""
    reason = namespaces.unavailable()
    if reason:
        raise RehearsalUnavailable(reason)
    toolkit_dir = toolkit_folder(toolkit) if toolkit else None
    hyper = request.get("HyperParameters", {})
    if _decoded(hyper.get("sagemaker_mpi_enabled", "false")) is True:
        raise ValueError("the rehearsal runs torchrun and smddp jobs; sagemaker_mpi_enabled is not rehearsed")
    smddp = _decoded(hyper.get("sagemaker_distributed_dataparallel_enabled", "false")) is True
    names = [f"algo-{i}" for i in range(1, request["ResourceConfig"]["InstanceCount"] + 1)]
    if smddp and len(names) > 1:
        raise ValueError("smddp is rehearsed on one host: more need sshd between the hosts")
    patches = []
    if gpus_per_host:
        patches.append(f"nvidia-smi: a stub lists {gpus_per_host} GPUs per host (this machine has none)")
    if smddp:
        patches += [
            (
                f"mpirun, smddprun: stubs record their command line and stop the job (exit {STUB_EXIT}): "
                "smddp needs its closed-source library and GPUs"
            ),
            "sagemaker_training.smdataparallel._start_sshd_daemon: skipped (no sshd needed on one host)",
        ]
    if image not in IMAGE_KINDS:
        raise ValueError(f"image {image!r}: one of {', '.join(IMAGE_KINDS)}")
    if image != "dlc":
        patches.append(f"image {image}: no DLC start script" + (", no toolkit command" if image == "python" else ""))
    isolated = bool(request.get("EnableNetworkIsolation"))  # no way out and no credentials in the container
    s3 = aws.client("s3")
    (sandbox / "hosts").write_text(_hosts_file(names))
    short = Path(tempfile.mkdtemp(prefix="smr-", dir="/tmp"))  # the hosts' TMPDIR links (see _prepare_host)
    try:
        configs = [
            _prepare_host(
                request,
                name,
                names,
                sandbox,
                aws,
                s3,
                gpus=gpus_per_host,
                smddp=smddp,
                isolated=isolated,
                toolkit=toolkit_dir,
                short=short,
                image=image,
            )
            for name in names
        ]
        started = time.monotonic()
        with namespaces.job_network(sandbox, None if isolated else aws.port) as network:
            codes = _run_hosts(
                [namespaces.host_argv(network, config) for config in configs],
                [config.parent / "container.log" for config in configs],
                started + timeout,
                stop,
            )
    finally:
        shutil.rmtree(short)  # the links only: their targets stay in the sandbox
    hosts = [
        HostRun(name, config.parent, code, (config.parent / "container.log").read_text(errors="replace"))
        for name, config, code in zip(names, configs, codes, strict=True)
    ]
    checkpoint = request.get("CheckpointConfig")
    if checkpoint:
        for host in hosts:
            _upload_folder(s3, _checkpoint_folder(host.opt_ml, checkpoint), checkpoint["S3Uri"])
    return Rehearsal(request, hosts, time.monotonic() - started, patches, toolkit or installed_toolkit())
