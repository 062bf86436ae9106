"""The request cloudddp sends starts and stops a job on an image that is not an AWS PyTorch DLC.

Rehearsed as in test_container_rehearsal.py (tests/support/sagemaker_container.py), with two kinds of image:
``byoc``, built the way AWS documents for your own container (``pip install sagemaker-training``: the toolkit's
``train`` command, but no DLC start script and no framework module, so the toolkit alone would run one process
per host and no torchrun), and ``python``, a plain Python image with torch (no toolkit command at all). PID 1 is
cloudddp's init from the request's ContainerEntrypoint (``/bin/sh`` + Python, no bash or tar); it finds no DLC
entry and runs cloudddp's own start (``_cloudddp_start.py``), which starts torchrun as the toolkit would.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from cloudddp.injob.container_start import STARTING
from tests.backends.sagemaker.test_container_rehearsal import aws, cpu_job, launch, metric_records, run, succeeded
from tests.backends.sagemaker.test_stop import INIT_PASSED, saver_job, text
from tests.support.dataloader_saver import RUNNING, WORKER_KILLED, saved, sigterms
from tests.support.sagemaker_container import Aws, Stop, two_host_flags

pytestmark = pytest.mark.slow
__all__ = ["aws"]  # the module's moto environment, shared with the container rehearsals

OWN_IMAGE = "111122223333.dkr.ecr.us-east-1.amazonaws.com/my-train:latest"
NO_ENTRY = "_cloudddp_init.py: the image has no bash -m start_with_right_hostname.sh train"


def started_command(log: str) -> list[str]:
    lines = log.splitlines()
    return shlex.split(lines[lines.index(STARTING) + 1])


@pytest.mark.parametrize("image", ["byoc", "python"])
def test_an_image_without_the_dlc_entry_trains_on_two_hosts(image: str, tmp_path: Path, aws: Aws) -> None:
    job = cpu_job(tmp_path, f"any-{image}", epochs=2, nodes=2)
    job["sagemaker"]["image"] = OWN_IMAGE
    request = launch(job, "i" + image[0])
    rehearsal = run(request, tmp_path / "box", aws, image=image)
    print(f"\n{image} image, 2 hosts: {rehearsal.seconds:.1f} s; patches: {rehearsal.patches}")
    succeeded(rehearsal)
    for rank, host in enumerate(rehearsal.hosts):
        assert NO_ENTRY in host.log, host.log[-3000:]
        argv = started_command(host.log)
        assert argv[1:13] == ["-m", "torch.distributed.run", *two_host_flags(rank, "1")], argv
        assert (host.opt_ml / "code" / "train.py").is_file()
    steps = 640 // (64 * 2)  # one process group over both hosts
    assert [r["step"] for r in metric_records(rehearsal) if "train_loss" in r] == [steps, 2 * steps]
    assert rehearsal.metrics()["test_acc"] == [r["test_acc"] for r in metric_records(rehearsal) if "test_acc" in r]
    assert (rehearsal.host("algo-1").opt_ml / "model" / "model.pt").stat().st_size > 0


@pytest.mark.parametrize("image", ["byoc", "python"])
def test_an_image_without_the_dlc_entry_stops_each_rank_once_and_saves(image: str, tmp_path: Path, aws: Aws) -> None:
    job = saver_job(tmp_path, 1, 2, ["--steps", "100000", "--save-delay", "3"])
    job["sagemaker"]["image"] = OWN_IMAGE
    request = launch(job, "j" + image[0])
    stop = Stop(on=RUNNING, grace=60)
    rehearsal = run(request, tmp_path / "box", aws, image=image, stop=stop, timeout=180)
    log = text(rehearsal)
    print(f"\n{image} image, stopped: {rehearsal.seconds:.1f} s")
    assert stop.sent_at is not None, log[-4000:]
    host = rehearsal.host("algo-1")
    assert host.returncode is not None, log[-4000:]  # ended by itself inside the grace
    assert host.log.count(INIT_PASSED) == 1, log[-4000:]  # torchrun's agent alone
    assert sigterms(log) == {0: 1, 1: 1} and not WORKER_KILLED.search(log), log[-4000:]
    assert len(saved(log)) == 1 and (host.opt_ml / "checkpoints" / "dataloader-saver.pt").is_file(), log[-4000:]
