"""``{{last_checkpoint:PATTERN}}``: a job hands the newest kept checkpoint to its script's own resume flag. Render
cannot know it (the folder's content at the job's start says), so every backend sends the placeholder as it is, in
one form, to each rank's launcher, which expands it (tests/injob/test_resume_arg.py); the plan says what it becomes,
from the folder where render reads one. Misplaced or malformed, it is an error that names the field (exit 2)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from cloudddp.api import Job
from cloudddp.backends.sagemaker.request import shim_payload
from cloudddp.errors import UserError
from cloudddp.injob.resume_arg import expand
from cloudddp.plan import Plan
from cloudddp.runs.runner import get_backend
from tests.support.cli import FIXTURES, cli
from tests.support.harnesses import AzureMLHarness, SageMakerHarness

SHAPED = FIXTURES / "shaped" / "job.yaml"
ARGS = (
    "code.args=[--output_dir, '{{checkpoint_dir}}', --checkpointing_steps, '20', --resume_from_checkpoint, "
    "'{{ last_checkpoint:step_* }}', '--also={{last_checkpoint:out/epoch_[0-9]*}}', --name, 'a b']"
)
SENT = ["--resume_from_checkpoint", "{{last_checkpoint:step_*}}", "--also={{last_checkpoint:out/epoch_[0-9]*}}"]


def sent(backend: str) -> list[str]:
    """The program's arguments as each backend's transport delivers them to the launcher: the words the shell makes
    of Slurm's script, local's script and Azure ML's command; the JSON inside SageMaker's base64 payload."""
    if backend == "sagemaker":
        plan = Job.load(SHAPED, [*SageMakerHarness.overrides, ARGS]).render(backend)
        argv: list[str] = shim_payload(plan.request["HyperParameters"])["argv"]
        return argv[1:]
    plan = _plan(backend)
    text = plan.documents.get("torchrun.sh") or plan.documents.get("job.sbatch") or plan.request["job"]["command"]
    line = next(line for line in text.replace("\\\n", " ").splitlines() if " train.py " in line)
    words = shlex.split(line.split(" train.py ", 1)[1])
    return words[: words.index("a b") + 1]


def _plan(backend: str) -> Plan[Any]:
    if backend == "slurm":
        return get_backend("slurm", token="t1").render(Job.load(SHAPED, [ARGS]).spec)
    if backend == "azureml":
        return Job.load(SHAPED, [*AzureMLHarness.overrides, ARGS]).render(backend)
    return Job.load(SHAPED, [ARGS]).render(backend)


@pytest.mark.parametrize("backend", ["local", "slurm", "sagemaker", "azureml"])
def test_every_backend_sends_the_placeholder_as_it_is_for_the_launcher_to_expand(backend: str, tmp_path: Path) -> None:
    argv = sent(backend)
    assert argv[2:6] == ["--checkpointing_steps", "20", *SENT[:2]], (backend, argv)
    assert argv[6:] == [SENT[2], "--name", "a b"], (backend, argv)
    (tmp_path / "step_40").mkdir()
    (tmp_path / "step_40" / "model.safetensors").write_text("x")
    expanded, _notes = expand(argv, str(tmp_path))
    assert expanded[5] == str(tmp_path / "step_40") and expanded[6] == "--also=", (backend, expanded)


def test_the_plan_says_what_the_script_is_given_from_the_folder_it_reads_and_elsewhere_when_it_is_chosen() -> None:
    plan = Job.load(SHAPED, [ARGS]).render("local")
    folder = Path(plan.request.env["CLOUDDDP_CHECKPOINT_DIR"])
    checkpoints = next(d for d in plan.decisions if d.startswith("checkpoints in"))
    assert "no checkpoint yet: starts from scratch; {{last_checkpoint:step_*}} is empty: nothing matches" in checkpoints
    for step in (20, 40):
        (folder / f"step_{step}").mkdir(parents=True)
        (folder / f"step_{step}" / "random_states_0.pkl").write_text("x")
    checkpoints = next(d for d in Job.load(SHAPED, [ARGS]).render("local").decisions if d.startswith("checkpoints in"))
    assert "{{last_checkpoint:step_*}} gives your script step_40 (the newest of 2 by the number in its name" in (
        checkpoints
    )
    assert "resumes from" not in checkpoints and "starts from scratch" not in checkpoints
    never = Job.load(SHAPED, [ARGS, "checkpoint.resume=never"]).render("local")
    assert '{{last_checkpoint:step_*}}, {{last_checkpoint:out/epoch_[0-9]*}} is given as ""' in next(
        d for d in never.decisions if d.startswith("checkpoints in")
    )
    cloud = Job.load(SHAPED, [*SageMakerHarness.overrides, ARGS]).render("sagemaker")
    assert any(
        d.startswith("{{last_checkpoint:step_*}}, {{last_checkpoint:out/epoch_[0-9]*}}: as each rank starts")
        for d in cloud.decisions
    ), cloud.decisions


def test_without_checkpointing_or_outside_the_arguments_it_is_an_error_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(UserError) as off:
        Job.load(SHAPED, ["code.args=[--resume, '{{last_checkpoint:step_*}}']", "checkpoint.enabled=false"]).render(
            "local"
        )
    assert "code.args: {{last_checkpoint:step_*}} names the newest checkpoint in a folder this job does not have" in (
        str(off.value)
    )
    assert "checkpoint.enabled" in (off.value.hint or "")
    with pytest.raises(UserError) as env:
        Job.load(SHAPED, ["env.RESUME='{{last_checkpoint:step_*}}'"]).render("local")
    assert "env.RESUME: {{last_checkpoint:step_*}} is expanded in the program's arguments alone" in str(env.value)
    spec = tmp_path / "job.yaml"
    spec.write_text(SHAPED.read_text().replace("checkpoint: {enabled: true}", "checkpoint: {enabled: false}"))
    spec.write_text(spec.read_text().replace('"{{checkpoint_dir}}/hf"', '"{{last_checkpoint:step_*}}"'))
    (tmp_path / "train.py").write_text("")
    result = cli("render", str(spec), "-b", "local")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "code.args: {{last_checkpoint:step_*}} names the newest checkpoint" in result.stderr, result.stderr
