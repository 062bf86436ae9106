"""A newcomer's first hour without a dead end: `validate` finds what `submit` would, `--json` is one document on
success and on failure, and `run.watch()` works outside a notebook."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.local.agent_output import StopTracebackFolder
from cloudddp.cli.options import format_record
from cloudddp.observe.live import EpochProgress, position
from cloudddp.observe.metrics import MetricRecord
from tests.support.cli import FIXTURES, ROOT, cli

TINY = FIXTURES / "tinyjob" / "job.yaml"


def project(tmp_path: Path, entry: str) -> Path:
    (tmp_path / "train.py").write_text("print('hello')\n")
    (tmp_path / "job.yaml").write_text(f"name: first\ncode:\n  dir: .\n  entry: {entry}\n")
    return tmp_path / "job.yaml"


def test_validate_names_a_missing_entry_file_with_its_line_and_the_closest_file(tmp_path: Path) -> None:
    result = cli("validate", str(project(tmp_path, "trian.py")))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "job.yaml:4: code.entry: trian.py is not a file" in result.stderr, result.stderr
    assert "did you mean 'train.py'?" in result.stderr
    fixed = cli("validate", str(tmp_path / "job.yaml"), "-o", "code.entry=train.py")
    assert fixed.returncode == 0, fixed.stderr
    overridden = cli("validate", str(tmp_path / "job.yaml"), "-o", "code.entry=nope.py")
    assert "override -o code.entry=nope.py: code.entry: nope.py is not a file" in overridden.stderr, overridden.stderr


def test_validate_json_is_one_document_on_stdout_whether_the_spec_is_valid_or_not(tmp_path: Path) -> None:
    bad = cli("validate", str(project(tmp_path, "trian.py")), "--json")
    assert bad.returncode == 2
    document = json.loads(bad.stdout)
    assert document["ok"] is False and "trian.py" in document["problems"][0] and document["hint"]
    (tmp_path / "typo.yaml").write_text("name: x\nresorces: {nodes: 2}\n")
    typo = json.loads(cli("validate", str(tmp_path / "typo.yaml"), "--json").stdout)
    assert typo["ok"] is False and any("did you mean 'resources'" in p for p in typo["problems"])
    good = json.loads(cli("validate", str(TINY), "--json").stdout)
    assert good["ok"] is True and good["spec"]["name"] == "tiny"


WATCH = """
import sys
from cloudddp.api import Job
run = Job.load(sys.argv[1], ["code.args=[--epochs, 2, --sleep, 0.1]"]).submit("local")
status = run.watch()
print("RETURNED", status.state.value)
"""


@pytest.mark.slow
def test_run_watch_outside_a_notebook_follows_as_text_and_returns_the_status(cloudddp_home: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", WATCH, str(TINY)], capture_output=True, text=True, cwd=ROOT, timeout=180
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "IPython.core.display" not in result.stdout
    assert "[rank0]" in result.stdout or "[node0/rank0]" in result.stdout, result.stdout[-2000:]
    assert "epoch 2" in result.stdout and "RETURNED succeeded" in result.stdout, result.stdout[-2000:]


def record(epoch: int | None, step: int | None = None, **values: float) -> MetricRecord:
    return MetricRecord(epoch=epoch, step=step, time=None, values=dict(values))


def test_the_epoch_bar_follows_any_scripts_epochs_and_the_shared_scripts_epoch_ends() -> None:
    own = EpochProgress()  # an own script counting from 0, one line per epoch: 3 epochs reach 3/3
    assert [own.update(record(e, loss=1.0)) for e in (0, 1, 2)] == [1, 2, 3]
    assert own.update(record(None, loss=0.5)) == 3  # a record naming no epoch moves nothing
    shared = EpochProgress()  # the shared script: progress records inside an epoch, epoch_time at its end
    reached = [shared.update(r) for r in (record(1, 10, loss=2.0), record(1, 20, epoch_time=3.0), record(2, 30))]
    assert reached == [1, 1, 1]  # epoch 2 has begun, not ended
    assert EpochProgress().update(record(None, 5, loss=1.0)) is None


def test_records_show_what_they_know_and_a_zero_loss_reads_as_a_number() -> None:
    assert position(record(2)) == "epoch 2" and position(record(None, 7)) == "step 7"
    assert format_record(record(1, loss=0.0)) == "epoch 1  loss=0.0"
    assert format_record(record(None, 3, acc=0.91234, n=5)) == "step 3  acc=0.9123  n=5"


def test_override_mistakes_are_reported_at_the_override_with_what_to_do() -> None:
    typo = cli("validate", str(TINY), "-o", "resorces.nodes=2")
    assert typo.returncode == 2 and "override -o resorces.nodes=2: resorces: unknown key" in typo.stderr, typo.stderr
    assert "did you mean 'resources'?" in typo.stderr and "job.yaml:1" not in typo.stderr
    unclosed = cli("validate", str(TINY), "-o", "code.args=[--epochs, 3")
    assert unclosed.returncode == 2 and "is not valid YAML" in unclosed.stderr, unclosed.stderr
    assert "-o 'code.args=[--epochs, 3]'" in unclosed.stderr and "valid list" not in unclosed.stderr
    word = cli("validate", str(TINY), "-o", "tags.url=http://x/y?a=b")  # YAML punctuation in a plain value
    assert word.returncode == 0, word.stderr


def test_json_commands_print_one_document_on_stdout_when_they_fail() -> None:
    result = cli("status", "no-such-run", "--json")
    assert result.returncode == 2
    document = json.loads(result.stdout)
    assert document["ok"] is False and "no run 'no-such-run'" in document["problems"][0] and document["hint"]


@pytest.mark.slow
def test_an_attached_submit_with_json_ends_with_one_document_the_final_status() -> None:
    result = cli("submit", str(TINY), "--json", "-o", "code.args=[--epochs, 2, --sleep, 0.1]", timeout=180)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)  # the whole of stdout: one document
    assert document["state"] == "succeeded" and document["run_id"] and document["backend"] == "local"


@pytest.mark.slow
def test_logs_tail_shows_only_the_last_lines() -> None:
    submitted = cli("submit", str(TINY), "--quiet", "-o", "code.args=[--epochs, 3, --sleep, 0.1]", timeout=180)
    assert submitted.returncode == 0, submitted.stderr
    everything = cli("logs").stdout.splitlines()  # the latest run
    last_two = cli("logs", "--tail", "2").stdout.splitlines()
    assert len(everything) > 2 and last_two == everything[-2:]


NO_CLOUD_ENV = {
    name: ""
    for name in (
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "CLOUDDDP_SAGEMAKER_ROLE",
        "AZURE_SUBSCRIPTION_ID",
        "AZURE_RESOURCE_GROUP",
        "AZUREML_WORKSPACE_NAME",
    )
}
CPU_JOB = ROOT / "jobs" / "digits-local.yaml"


def test_validate_with_a_backend_names_every_missing_setting_at_once_with_an_example(tmp_path: Path) -> None:
    sagemaker = cli("validate", str(CPU_JOB), "-b", "sagemaker", env=NO_CLOUD_ENV, cwd=tmp_path)
    assert sagemaker.returncode == 2 and "Traceback" not in sagemaker.stderr
    assert "the sagemaker backend needs 3 settings" in sagemaker.stderr, sagemaker.stderr
    for line in (
        "sagemaker.region: the AWS region to train in (e.g. us-east-1, or AWS_REGION in the environment)",
        "e.g. arn:aws:iam::111122223333:role/SageMakerRole, or CLOUDDDP_SAGEMAKER_ROLE",
        "sagemaker.instance_type: a CPU size",
        "    instance_type: ml.c5.2xlarge\n",  # the snippet to paste names a CPU size
    ):
        assert line in sagemaker.stderr, (line, sagemaker.stderr)
    azure = json.loads(cli("validate", str(CPU_JOB), "-b", "azureml", "--json", env=NO_CLOUD_ENV, cwd=tmp_path).stdout)
    fields = [problem.split(":")[0] for problem in azure["problems"]]
    assert azure["ok"] is False and fields == [
        "azureml.vm_size",
        "azureml.subscription_id",
        "azureml.resource_group",
        "azureml.workspace",
    ]
    assert "vm_size: Standard_D8s_v5" in azure["hint"]
    given = [
        "-o",
        "sagemaker.region=us-east-1",
        "-o",
        "sagemaker.role=arn:aws:iam::111122223333:role/SageMakerRole",
        "-o",
        "sagemaker.instance_type=ml.c5.xlarg",
    ]
    typo = cli("validate", str(CPU_JOB), "-b", "sagemaker", *given, env=NO_CLOUD_ENV, cwd=tmp_path)
    assert typo.returncode == 2 and "did you mean 'ml.c5.xlarge'?" in typo.stderr, typo.stderr
    given[-1] = "sagemaker.instance_type=ml.c5.xlarge"
    fixed = cli("validate", str(CPU_JOB), "-b", "sagemaker", *given, env=NO_CLOUD_ENV, cwd=tmp_path)
    assert fixed.returncode == 0 and "the sagemaker backend has every setting it needs" in fixed.stdout, fixed.stderr


def test_render_reports_every_missing_setting_it_needs_in_one_message(tmp_path: Path) -> None:
    result = cli("render", str(CPU_JOB), "-b", "azureml", env=NO_CLOUD_ENV, cwd=tmp_path)
    assert result.returncode == 2 and "azureml.vm_size: a CPU size" in result.stderr, result.stderr
    assert "subscription_id" not in result.stderr  # only a submit needs the workspace; validate -b says so


def test_validate_refuses_an_azure_size_missing_its_version_and_the_templates_placeholders(tmp_path: Path) -> None:
    """`Standard_NC24ads_A100` (no `_v4`) and the template's `<subscription>` and `<workspace>` placeholders exit
    2, each with its line; the SageMaker typo has its line too."""
    (tmp_path / "train.py").write_text("print('hi')\n")
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: t\ncode:\n  dir: .\n  entry: train.py\nresources:\n  gpus_per_node: 1\nazureml:\n"
        "  subscription_id: <subscription>\n  resource_group: rg\n  workspace: <workspace>\n"
        "  vm_size: Standard_NC24ads_A100\n"
    )
    result = cli("validate", str(spec), "-b", "azureml", env=NO_CLOUD_ENV, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert (
        f"{spec}:11: azureml.vm_size: Standard_NC24ads_A100 is not an Azure VM size; did you mean "
        "'Standard_NC24ads_A100_v4'?" in result.stderr
    ), result.stderr
    assert f"{spec}:8: azureml.subscription_id: <subscription> is the template's placeholder" in result.stderr
    assert f"{spec}:10: azureml.workspace: <workspace> is the template's placeholder" in result.stderr
    fixed = ["-o", "azureml.vm_size=Standard_NC24ads_A100_v4", "-o", "azureml.subscription_id=sub"]
    assert cli("validate", str(spec), *fixed, "-o", "azureml.workspace=w", cwd=tmp_path).returncode == 0
    spec.write_text(spec.read_text().split("azureml:")[0] + "sagemaker:\n  instance_type: ml.g5.48xlarg\n")
    typo = cli("validate", str(spec), "-b", "sagemaker", env=NO_CLOUD_ENV, cwd=tmp_path)
    assert typo.returncode == 2 and f"{spec}:8: sagemaker.instance_type: 'ml.g5.48xlarg'" in typo.stderr, typo.stderr


def test_plan_ranks_sagemaker_sizes_without_a_role_and_says_submit_needs_one(tmp_path: Path) -> None:
    job = ROOT / "jobs" / "cifar10-resnet18.yaml"
    result = cli("plan", str(job), "-b", "sagemaker", "-o", "sagemaker.role=null", env=NO_CLOUD_ENV, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "ml.g5.48xlarge" in result.stdout and "chosen" in result.stdout, result.stdout
    assert "sagemaker.role is not set: this plan uses a stand-in; submit needs" in result.stderr, result.stderr
    refused = cli("render", str(job), "-b", "sagemaker", "-o", "sagemaker.role=null", env=NO_CLOUD_ENV, cwd=tmp_path)
    assert refused.returncode == 2 and "sagemaker.role: the IAM role" in refused.stderr, refused.stderr


def test_plain_init_writes_a_project_that_validates_and_says_what_to_do_next(tmp_path: Path) -> None:
    result = cli("init", str(tmp_path / "proj"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "proj" / "train.py").is_file() and f"next: cloudddp submit {tmp_path / 'proj'}" in result.stdout
    assert cli("validate", str(tmp_path / "proj" / "job.yaml")).returncode == 0
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "train.py").write_text("print('my own')\n")
    kept = cli("init", str(mine))
    assert kept.returncode == 0 and "kept" in kept.stdout and (mine / "train.py").read_text() == "print('my own')\n"


DATA_READER = """import argparse, pathlib
parser = argparse.ArgumentParser()
parser.add_argument("--data-dir")
args = parser.parse_args()
shipped = pathlib.Path(__file__).parent / "data"
print("DATA", (pathlib.Path(args.data_dir) / "train.bin").stat().st_size, "SHIPPED", shipped.exists(), flush=True)
"""


def project_with_data_inside(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.bin").write_bytes(b"\0" * 200_000)
    (tmp_path / "train.py").write_text(DATA_READER)
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: data-inside\ncode: {dir: ., entry: train.py}\n"
        "inputs:\n  data: {path: ./data, arg: --data-dir}\n  everything: {path: .}\n"
        "  remote: {path: 's3://bucket/data/', at: {local: ./data}}\n"
        "local: {processes_per_node: 1}\n"
    )
    return spec


def test_inputs_inside_the_code_folder_are_left_out_of_the_snapshot_with_a_note(tmp_path: Path) -> None:
    spec = project_with_data_inside(tmp_path)
    listed = cli("render", str(spec), "--list-files", "--json")
    assert listed.returncode == 0, listed.stderr
    document = json.loads(listed.stdout)
    assert "train.py" in document["files"] and not any(f.startswith("data/") for f in document["files"])
    assert document["left_out_as_inputs"] == {"data": "data"}  # not `everything`: that is the whole folder
    plan = cli("render", str(spec), "-b", "local")
    assert "left out of the code snapshot: data, which is inputs.data" in plan.stderr, plan.stderr
    assert "CLOUDDDP_INPUT_DATA" in plan.stderr


@pytest.mark.slow
def test_an_input_left_out_of_the_snapshot_still_reaches_the_script(tmp_path: Path) -> None:
    result = cli("submit", str(project_with_data_inside(tmp_path)), timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "DATA 200000 SHIPPED False" in result.stdout + result.stderr, (result.stdout + result.stderr)[-2000:]


AGENT_STOPPED = """W1125 11:38:49.804000 8483 torch/distributed/elastic/agent/server/api.py:753] Received 15 death
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 1028, in main
    run(args)
  File "/venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/api.py", line 86, in _terminate
    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)
torch.distributed.elastic.multiprocessing.api.SignalException: Process 8483 got signal: 15
"""
AGENT_CRASHED = """Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 1028, in main
ValueError: a real failure
"""


def without_stop_traceback(lines: list[str], *, asked: bool = True) -> list[str]:
    """What the supervisor records of ``lines``, fed one by one as it copies them, then flushed at the end
    (``asked``: the supervisor had signalled the agent)."""
    folder = StopTracebackFolder(lambda: asked)
    return [kept for line in lines for kept in folder.feed(line)] + folder.flush()


def test_a_stopped_agents_signal_traceback_is_one_line_and_any_other_traceback_stays() -> None:
    stopped = without_stop_traceback(AGENT_STOPPED.splitlines(keepends=True))
    assert stopped[0].startswith("W1125") and len(stopped) == 2, stopped
    assert stopped[1].startswith("torchrun stopped on signal 15, after passing it to its processes")
    unasked = AGENT_STOPPED.splitlines(keepends=True)  # a signal from someone else: the traceback stays
    assert without_stop_traceback(unasked, asked=False) == unasked
    crashed = AGENT_CRASHED.splitlines(keepends=True)
    assert (without_stop_traceback(crashed)) == crashed
    cut_short = crashed[:2]  # the stream ended inside a traceback: nothing is lost
    assert (without_stop_traceback(cut_short)) == cut_short


@pytest.mark.slow
def test_a_cancelled_own_script_checkpoints_and_its_log_ends_without_a_traceback(tmp_path: Path) -> None:
    assert cli("init", str(tmp_path / "p")).returncode == 0
    run = Job.load(tmp_path / "p" / "job.yaml", ["code.args=[--epochs, '100000']"]).submit("local")
    next(iter(run.metrics(follow=True)))  # an epoch has ended
    assert run.cancel()
    ended = run.wait(timeout=120, poll=0.2)
    assert ended.state.value == "cancelled"
    # The record says what happened: the stop's exit codes are named as the stop's, none is kept as a failure's.
    assert ended.message.startswith("cancelled on request") and ended.details["exit_codes"] == [], ended
    assert "exit_codes" not in cli("status", run.run_id).stdout
    log = cli("logs", run.run_id).stdout
    assert "Traceback" not in log and "torchrun stopped on signal 15" in log, log[-3000:]
    (checkpoint,) = (Path(os.environ["CLOUDDDP_HOME"]) / "checkpoints" / "p").glob("*/last.pt")
    # The checkpoint is the stop's, not only the last per-epoch save: the script left its loop on the SIGTERM,
    # wrote its model after it, and that model is the checkpoint's, at the last epoch it reported.
    import torch

    state = torch.load(checkpoint, weights_only=True)
    model = torch.load(Path(run.status().details["run_dir"]) / "outputs" / "model.pt", weights_only=True)
    assert model.keys() == state["model"].keys() and all(torch.equal(model[k], state["model"][k]) for k in model)
    assert state["epoch"] + 1 == max(r.epoch for r in run.metrics())


def test_charts_of_an_own_scripts_epoch_records_count_epochs_not_steps() -> None:
    pytest.importorskip("matplotlib", reason="charts need the notebook extra")
    from cloudddp.observe.plotting import plot_metrics

    figure = plot_metrics([record(e, loss=1.0 / e) for e in (1, 2, 3)])
    (axes,) = figure.axes
    assert axes.get_xlabel() == "epoch" and list(axes.lines[0].get_xdata()) == [1.0, 2.0, 3.0]
    stepped = plot_metrics([record(1, 10, loss=1.0), record(1, 20, loss=0.5)])
    assert stepped.axes[0].get_xlabel().startswith("step")


def test_every_command_s_help_shows_an_example() -> None:
    import click
    from click.testing import CliRunner

    from cloudddp.cli.app import app

    missing = []
    for command in app.list_commands(click.Context(app)):  # a backend's own (cloudddp storage) too
        shown = CliRunner().invoke(app, [command, "--help"]).output
        if not any(line.strip().startswith(f"cloudddp {command}") for line in shown.splitlines()):
            missing.append(command)
    assert not missing, missing


def test_check_shows_every_backend_with_the_fix_for_each_and_is_in_the_quick_start(tmp_path: Path) -> None:
    """One command that checks every installed backend's settings, credentials and reachability (`sky
    check`); with -b it exits 1 for a backend that is not ready."""
    result = cli("check", "--json", env=NO_CLOUD_ENV, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    checks = json.loads(result.stdout)
    assert {"local", "sagemaker", "azureml", "slurm"} <= set(checks), checks
    assert all(c["ok"] for c in checks["local"]) and any("torch" in c["name"] for c in checks["local"]), checks
    region = next(c for c in checks["sagemaker"] if c["name"] == "setting sagemaker.region")
    assert region["ok"] is False and "export AWS_REGION=" in region["fix"], region
    subscription = next(c for c in checks["azureml"] if c["name"] == "setting azureml.subscription_id")
    assert "export AZURE_SUBSCRIPTION_ID=" in subscription["fix"], subscription
    assert all(c["fix"] for name in ("sagemaker", "azureml") for c in checks[name] if c["ok"] is False)
    table = cli("check", env=NO_CLOUD_ENV, cwd=tmp_path)
    assert "ready: local" in table.stdout and "export AWS_REGION=" in " ".join(table.stdout.split()), table.stdout
    assert cli("check", "-b", "sagemaker", env=NO_CLOUD_ENV, cwd=tmp_path).returncode == 1
    assert cli("check", "-b", "local", env=NO_CLOUD_ENV, cwd=tmp_path).returncode == 0
    quick_start = (ROOT / "README.md").read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "$ cloudddp check " in quick_start


def test_a_mistyped_or_borrowed_command_name_names_the_command_meant() -> None:
    for typed, meant in (("sizes", "skus"), ("stauts", "status"), ("ls", "list")):
        result = cli(typed)
        assert result.returncode == 2 and f"did you mean '{meant}'?" in result.stderr, (typed, result.stderr)
    assert "did you mean" not in cli("zzz").stderr
