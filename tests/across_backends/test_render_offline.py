"""Render needs no network: every example job renders for every backend it is written for with ssh failing and
every socket connection refused, in this process; and a Slurm render through a login host, without
``slurm.workdir``, runs no command at all (the working folder is asked for at submit)."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import Any, NoReturn

import pytest

from cloudddp.api import Job
from cloudddp.backends.slurm.workdir import LATE, WORKDIR
from tests.support.cli import FIXTURES, ROOT

BACKENDS = ("local", "sagemaker", "azureml", "slurm")
JOBS = [*sorted(ROOT.glob("jobs/*.yaml")), *sorted(ROOT.glob("examples/*/job.yaml"))]
WRITTEN_FOR = {"cifar10-azureml.yaml": "azureml", "cifar10-smddp.yaml": "sagemaker", "cifar10-slurm.yaml": "slurm"}
"""The jobs written for one backend (inputs only it reaches, its own data-parallel library); the others are for
every backend."""
CONFIG = """\
sagemaker:
  region: eu-west-1
  role: arn:aws:iam::111122223333:role/OfflineTrainingRole
  bucket: offline-artifacts
azureml:
  subscription_id: 00000000-0000-0000-0000-000000000000
  resource_group: offline-rg
  workspace: offline-ws
"""
"""What the clouds need to render (no slurm.workdir: the Slurm plans leave it to submit)."""
CPU_SIZES = ["sagemaker.instance_type=ml.c5.2xlarge", "azureml.vm_size=Standard_D8s_v5"]
"""What a CPU job names on the clouds (cloudddp ranks GPU sizes only)."""


def cases() -> list[tuple[Path, str]]:
    return [(job, b) for job in JOBS for b in BACKENDS if WRITTEN_FOR.get(job.name, b) == b]


class Offline:
    """Every way out of this machine that a render could take, shut and recorded: a fake ``ssh`` first on PATH that
    fails loudly, and socket connections and name lookups refused."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tried: list[str] = []
        self.ssh_log = tmp_path / "ssh-was-run"
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        ssh = bin_dir / "ssh"
        ssh.write_text(f'#!/bin/sh\necho "ssh $*" >> {self.ssh_log}\necho "render ran ssh $*" >&2\nexit 255\n')
        ssh.chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setattr(socket.socket, "connect", self._refused("connect"))
        monkeypatch.setattr(socket.socket, "connect_ex", self._refused("connect_ex"))
        monkeypatch.setattr(socket, "getaddrinfo", self._refused("getaddrinfo"))

    def _refused(self, what: str) -> Any:
        def refuse(*args: object, **kwargs: object) -> NoReturn:
            self.tried.append(f"{what}{args[1:] if what.startswith('connect') else args}")
            raise ConnectionRefusedError(f"render tried to reach the network: {what}")

        return refuse

    def reached(self) -> list[str]:
        return self.tried + (self.ssh_log.read_text().splitlines() if self.ssh_log.exists() else [])


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cloudddp_home: Path) -> Offline:
    config = cloudddp_home / "config.yaml"
    config.write_text(CONFIG)
    config.chmod(0o600)
    for name in ("SCRATCH", "WORK", "CLOUDDDP_SLURM_WORKDIR"):
        monkeypatch.delenv(name, raising=False)
    return Offline(tmp_path, monkeypatch)


@pytest.mark.parametrize(
    ("job", "backend"), cases(), ids=lambda v: str(v.relative_to(ROOT)) if isinstance(v, Path) else v
)
def test_every_example_job_renders_offline(job: Path, backend: str, offline: Offline) -> None:
    loaded = Job.load(job)
    plan = (Job.load(job, CPU_SIZES) if loaded.spec.resources.gpus_per_node == 0 else loaded).render(backend)
    assert plan.documents, plan
    assert offline.reached() == []
    if backend == "slurm" and not loaded.spec.section("slurm").workdir:
        assert plan.late == (LATE,) and plan.request.workdir == WORKDIR


def test_a_slurm_render_through_a_login_host_without_workdir_runs_no_command(
    offline: Offline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No command of the cluster's, and none through ssh: the only one the render runs is the code snapshot's
    ``git ls-files`` on this machine (which of the code folder's files git ignores)."""
    ran: list[object] = []
    real = {"run": subprocess.run, "Popen": subprocess.Popen}

    def refusing(name: str) -> Any:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            argv = list(args[0] if args else kwargs["args"])
            if Path(argv[0]).name == "git" and "ls-files" in argv:
                return real[name](*args, **kwargs)
            ran.append(argv)
            raise AssertionError(f"render ran a command: {argv}")

        return refuse

    monkeypatch.setattr(subprocess, "run", refusing("run"))
    monkeypatch.setattr(subprocess, "Popen", refusing("Popen"))
    job = Job.load(FIXTURES / "tinyjob" / "job.yaml", ["slurm.login_host=login.cluster.example.org"])
    plan = job.render("slurm")
    assert ran == [] and offline.reached() == []
    assert plan.late == (LATE,) and plan.request.script_path.startswith(f"{WORKDIR}/runs/tiny-")
    assert any("resolved at submit" in line for line in plan.decisions), plan.decisions
