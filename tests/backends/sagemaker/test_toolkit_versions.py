"""SageMaker as AWS ships it: the request runs on the toolkit versions the images carry, PID 1 included.

The AL2023 PyTorch images (2.11-2.13) pin ``sagemaker-training`` 5.1.1, which runs the launcher's command
line through ``/bin/sh``; the newest (5.1.4 here) does not. Each rehearsal runs the request exactly as
sent, PID 1 being what the request's ContainerEntrypoint names (cloudddp's init), which starts the image's
real entry script (``bash -m start_with_right_hostname.sh train``) and so the toolkit at that version
(tests/support/image/toolkits.json says where the versions come from).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.backends.sagemaker.test_container_rehearsal import aws, cpu_job, launch, probe_job, run, succeeded  # noqa: F401 - aws: a fixture
from tests.support.sagemaker_container import TOOLKITS, Aws, Rehearsal, Stop

pytestmark = pytest.mark.slow

# Everything a shell or the toolkit's hyperparameter mapping would change: positional arguments, spaces,
# quotes, --k=v, a JSON value, $HOME, a glob, backquotes, a backslash, an empty argument, non-ASCII.
AWKWARD = [
    "first",
    "two words",
    "it's",
    'say "hi"',
    "--k=v",
    "--json",
    '{"a": [1, "b c"], "d": null}',
    "$HOME",
    "--lr",
    "0.10",
    "",
    "`id`",
    "*",
    "a\\b",
    "ü",
]


def records(rehearsal: Rehearsal) -> list[dict[str, Any]]:
    """The probe's record of every rank (argv, environment), from every host's model folder."""
    return [
        json.loads(path.read_text())
        for host in rehearsal.hosts
        for path in sorted((host.opt_ml / "model").glob("probe-*.json"))
    ]


@pytest.mark.parametrize("toolkit", TOOLKITS)
@pytest.mark.parametrize("layout", ["1x2", "2x1"], ids=["one-host-two-processes", "two-hosts"])
def test_awkward_arguments_arrive_byte_for_byte_on_the_images_toolkits(
    toolkit: str,
    layout: str,
    tmp_path: Path,
    aws: Aws,  # noqa: F811 - the fixture
) -> None:
    nodes, processes = (int(n) for n in layout.split("x"))
    job = probe_job(tmp_path, f"shipped-{layout}", AWKWARD)
    job["resources"].update(nodes=nodes, processes_per_node=processes)
    request = launch(job, "k" + toolkit.replace(".", ""))
    rehearsal = run(request, tmp_path / "box", aws, toolkit=toolkit)
    print(f"\n{layout} on sagemaker-training {rehearsal.toolkit}: {rehearsal.seconds:.1f} s")
    succeeded(rehearsal)
    found = records(rehearsal)
    assert len(found) == 2, [h.log[-2000:] for h in rehearsal.hosts]
    for record in found:
        assert record["argv"][1:] == [*AWKWARD, "--data-dir", "/opt/ml/input/data/train"]
        for key, value in request["Environment"].items():  # the spec's NCCL settings too
            assert record["env"][key] == value, key
    assert sorted(r["env"]["RANK"] for r in found) == ["0", "1"]


_PASSED = re.compile(r"_cloudddp_init\.py: signal 15 passed on to (\d+) process")
_FORWARDED = "_cloudddp_launch.py: SIGTERM passed on to the program"
STOP_GRACE = 60.0  # the rehearsal's SIGKILL after the SIGTERM (SageMaker's is 120 s)
_STOPPED = re.compile(r"stopping on SIGTERM at (?:epoch (\d+), step (\d+)|the end of epoch (\d+)); checkpoint written")


@pytest.mark.parametrize("toolkit", TOOLKITS[:1])
def test_sigterm_to_pid_1_checkpoints_and_a_second_job_resumes_from_it(
    toolkit: str,
    tmp_path: Path,
    aws: Aws,  # noqa: F811 - the fixture
) -> None:
    """A StopTrainingJob (or spot interruption, or MaxRuntime) sends SIGTERM to the container's PID 1."""
    job = cpu_job(tmp_path, "shipped-stop", epochs=500, processes=2)
    request = launch(job, "st1")
    stop = Stop(on='"train_loss"', grace=STOP_GRACE)  # once epoch 1 has ended, mid-training
    first = run(request, tmp_path / "first", aws, toolkit=toolkit, stop=stop)
    host = first.host("algo-1")
    print(f"\nstopped rehearsal: {first.seconds:.1f} s, sagemaker-training {first.toolkit}")
    assert stop.sent_at is not None, host.log[-3000:]
    # Every process ended by itself inside the grace (None would be the rehearsal's SIGKILL).
    assert host.returncode is not None, host.log[-3000:]
    # PID 1 signalled torchrun's agent alone, once; torchrun each rank's launcher, which passed it to its program.
    passed = [int(m.group(1)) for m in map(_PASSED.search, host.lines) if m]
    assert passed == [1], host.log[-3000:]
    assert host.log.count(_FORWARDED) == 2, host.log[-3000:]
    matches = [m for m in map(_STOPPED.search, host.lines) if m]
    assert len(matches) == 1, host.log[-3000:]  # the script checkpointed where it was, and said so
    found = matches[0]
    epoch = int(found.group(1) or int(found.group(3)) + 1)  # the epoch the second job finishes
    written = sorted((host.opt_ml / "checkpoints").glob("ckpt-*.pt"))
    assert written, "no checkpoint in CheckpointConfig.LocalPath"
    newest = written[-1].name
    step = f"s{int(found.group(2)):07d}" if found.group(1) else "s0000000"
    assert newest.endswith(f"{step}.pt"), (newest, found.group(0))
    bucket, _, prefix = request["CheckpointConfig"]["S3Uri"].removeprefix("s3://").partition("/")
    listed = aws.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix + "/")["Contents"]
    keys = {o["Key"].rsplit("/", 1)[1] for o in listed}
    assert newest in keys  # on the checkpoint path

    more = cpu_job(tmp_path, "shipped-stop", epochs=epoch, processes=2)
    more["checkpoint"] = {"path": request["CheckpointConfig"]["S3Uri"]}
    second = run(launch(more, "st2"), tmp_path / "second", aws, toolkit=toolkit)
    succeeded(second)
    assert any(f"resumed from /opt/ml/checkpoints/{newest}" in line for line in second.host("algo-1").lines)
    assert (second.host("algo-1").opt_ml / "model" / "model.pt").is_file()


AL2023_CPU_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch:2.13-cpu-amzn2023-sagemaker"


@pytest.mark.parametrize(
    ("image", "proto"),
    [
        (AL2023_CPU_IMAGE, None),
        ("763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.4-cpu-py311", "simple"),
    ],
    ids=["al2023-plugin-picks", "older-image-keeps-the-toolkits"],
)
def test_the_toolkits_nccl_proto_is_removed_where_the_images_plugin_picks_the_protocol(
    image: str,
    proto: str | None,
    tmp_path: Path,
    aws: Aws,  # noqa: F811 - the fixture
) -> None:
    job = probe_job(tmp_path, "shipped-proto", ["x"])
    job["sagemaker"]["image"] = image
    rehearsal = run(launch(job, "np" + str(len(image))), tmp_path / "box", aws, toolkit=TOOLKITS[0])
    succeeded(rehearsal)
    [record] = records(rehearsal)
    assert record["env"].get("NCCL_PROTO") == proto


def test_a_code_command_runs_with_its_exact_argv(tmp_path: Path, aws: Aws) -> None:  # noqa: F811 - the fixture
    """``code.command`` (a program, not an entry script): the launcher runs it instead of ``python entry``."""
    job = probe_job(tmp_path, "shipped-command", [])
    job["code"] = {"dir": job["code"]["dir"], "command": ["python", "-u", "probe.py", "it's", "$HOME"]}
    job["resources"].update(processes_per_node=2)
    rehearsal = run(launch(job, "cm1"), tmp_path / "box", aws, toolkit=TOOLKITS[0])
    succeeded(rehearsal)
    found = records(rehearsal)
    assert len(found) == 2
    for record in found:
        assert record["argv"] == ["probe.py", "it's", "$HOME", "--data-dir", "/opt/ml/input/data/train"]
