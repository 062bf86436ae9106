"""The user configuration holds each backend's settings outside the job (docs/configuration.md).

Where it is found, what wins (-o > the job > an environment variable the backend reads > the file), how a mistake in
it is reported (its file and line, exit 2), and that a file others may have written is refused.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.plugins import backend_class, configured_backends, load_spec, spec_from_dict
from cloudddp.errors import UserError
from cloudddp.paths import UnsafeFolder
from cloudddp.spec import userconfig
from cloudddp.spec.userconfig import config_path
from tests.support.cli import cli

ROLE = "arn:aws:iam::111122223333:role/FromConfig"
CONFIG = f"""\
# settings every job shares
backends: [slurm, sagemaker]
sagemaker:
  region: eu-west-1
  role: {ROLE}
  bucket: config-bucket
slurm:
  workdir: /scratch/me/cloudddp
  partition: gpu
"""
NO_ENV = ("AWS_REGION", "AWS_DEFAULT_REGION", "CLOUDDDP_SAGEMAKER_ROLE", "XDG_CONFIG_HOME", "CLOUDDDP_CONFIG")


@pytest.fixture(autouse=True)
def no_cloud_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in NO_ENV:
        monkeypatch.delenv(name, raising=False)


def write_config(folder: Path, text: str = CONFIG, mode: int = 0o600) -> Path:
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / "config.yaml"
    path.write_text(text)
    path.chmod(mode)
    return path


def job_file(tmp_path: Path, sagemaker: str = "{instance_type: ml.c5.2xlarge}") -> Path:
    (tmp_path / "train.py").write_text("print('hi')\n")
    path = tmp_path / "job.yaml"
    path.write_text(f"name: tiny\ncode: {{dir: ., entry: train.py}}\nsagemaker: {sagemaker}\n")
    return path


def test_the_file_is_found_at_cloudddp_config_then_cloudddp_home_then_xdg(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    monkeypatch.delenv("CLOUDDDP_HOME")
    assert config_path() == tmp_path / "me" / ".config" / "cloudddp" / "config.yaml"
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/ignored")  # the XDG spec: a relative value is ignored
    assert config_path() == tmp_path / "me" / ".config" / "cloudddp" / "config.yaml"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert config_path() == tmp_path / "xdg" / "cloudddp" / "config.yaml"
    monkeypatch.setenv("CLOUDDDP_HOME", str(tmp_path / "state"))
    assert config_path() == tmp_path / "state" / "config.yaml"
    monkeypatch.setenv("CLOUDDDP_CONFIG", str(tmp_path / "mine.yaml"))
    assert config_path() == tmp_path / "mine.yaml"

    write_config(tmp_path / "xdg" / "cloudddp")  # found through XDG once the two variables are gone
    monkeypatch.delenv("CLOUDDDP_CONFIG")
    monkeypatch.delenv("CLOUDDDP_HOME")
    assert load_spec(job_file(tmp_path)).section("sagemaker").role == ROLE


def test_the_job_wins_key_by_key_and_an_override_wins_over_both(cloudddp_home: Path, tmp_path: Path) -> None:
    config = write_config(cloudddp_home)
    job = job_file(tmp_path, "{instance_type: ml.c5.2xlarge}")
    sm = load_spec(job).section("sagemaker")
    assert (sm.role, sm.region, sm.instance_type) == (ROLE, "eu-west-1", "ml.c5.2xlarge")
    (tmp_path / "other").mkdir()
    sm = load_spec(job_file(tmp_path / "other", "{bucket: job-bucket}")).section("sagemaker")
    assert (sm.bucket, sm.role) == ("job-bucket", ROLE)
    overrides = ["sagemaker.bucket=cli-bucket", "sagemaker.role=arn:aws:iam::1:role/X"]
    assert load_spec(job_file(tmp_path / "other", "{bucket: job-bucket}"), overrides).section("sagemaker").bucket == (
        "cli-bucket"
    )
    overridden = load_spec(job, ["sagemaker.region=us-west-2"])
    assert overridden.section("sagemaker").region == "us-west-2"
    assert overridden.settings_notes("sagemaker") == [f"sagemaker.role, sagemaker.bucket from {config}"]
    assert load_spec(job).section("slurm").partition == "gpu"  # a section the job lacks comes whole


def test_a_config_only_setting_renders_and_the_plan_says_where_it_came_from(
    cloudddp_home: Path, tmp_path: Path
) -> None:
    path = write_config(cloudddp_home)
    plan = backend_class("sagemaker")().render(load_spec(job_file(tmp_path)))
    assert plan.request["RoleArn"] == ROLE and plan.target.region == "eu-west-1"
    assert "config-bucket" in plan.request["CheckpointConfig"]["S3Uri"]
    line = f"sagemaker.region, sagemaker.role, sagemaker.bucket from {path}"
    assert line in plan.decisions, plan.decisions


def test_an_environment_variable_the_backend_reads_beats_the_file(
    cloudddp_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config(cloudddp_home)
    monkeypatch.setenv("CLOUDDDP_SAGEMAKER_ROLE", "arn:aws:iam::999988887777:role/FromEnv")
    plan = backend_class("sagemaker")().render(load_spec(job_file(tmp_path)))
    assert plan.request["RoleArn"] == "arn:aws:iam::999988887777:role/FromEnv"
    assert f"sagemaker.role from CLOUDDDP_SAGEMAKER_ROLE in the environment, over {path}" in plan.decisions


def test_the_python_api_reads_it_too(cloudddp_home: Path, tmp_path: Path) -> None:
    write_config(cloudddp_home)
    job = Job.create("api", base_dir=tmp_path, sagemaker={"bucket": "mine"})
    assert (job.spec.section("sagemaker").role, job.spec.section("sagemaker").bucket) == (ROLE, "mine")
    assert spec_from_dict({"name": "d"}).section("slurm").workdir == "/scratch/me/cloudddp"


def test_configured_backends_is_the_files_order_else_its_sections(cloudddp_home: Path) -> None:
    assert configured_backends() == []
    write_config(cloudddp_home)
    assert configured_backends() == ["slurm", "sagemaker"]
    write_config(cloudddp_home, CONFIG.replace("backends: [slurm, sagemaker]\n", ""))
    assert configured_backends() == ["sagemaker", "slurm"]
    write_config(cloudddp_home, "# nothing yet\n")
    assert configured_backends() == []


def test_a_mistake_in_the_file_names_the_file_and_its_line_with_the_nearest_key(
    cloudddp_home: Path, tmp_path: Path
) -> None:
    path = write_config(cloudddp_home, "sagemaker: {region: eu-west-1}\nazurml: {}\nbackends: [slurm, slrum, slurm]\n")
    with pytest.raises(UserError) as caught:
        load_spec(job_file(tmp_path))
    assert caught.value.problems == [  # type: ignore[attr-defined]
        f"{path}:2: azurml: not a backend; did you mean 'azureml'? (valid here: backends, azureml, local, sagemaker, "
        "slurm)",
        f"{path}:3: backends[1]: no backend 'slrum'; did you mean 'slurm'? (registered: azureml, local, sagemaker, "
        "slurm)",
        f"{path}:3: backends[2]: 'slurm' is named twice",
    ]

    # a section's settings: merged into the job's own section, or read when its backend is used; each against its line
    path = write_config(cloudddp_home, "sagemaker:\n  region: eu-west-1\n  regoin: x\nslurm:\n  workdir: relative\n")
    job = job_file(tmp_path)
    with pytest.raises(UserError, match=f"{path}:3: sagemaker.regoin: unknown key; did you mean 'region'"):
        load_spec(job)
    slurm_job = tmp_path / "slurm.yaml"
    slurm_job.write_text("name: tiny\ncode: {dir: ., entry: train.py}\n")
    spec = load_spec(slurm_job)  # the job names no backend section: nothing is read yet
    with pytest.raises(UserError, match=f"{path}:5: slurm.workdir: give an absolute path"):
        spec.section("slurm")
    result = cli("render", str(slurm_job), "-b", "slurm")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"{path}:5: slurm.workdir" in result.stderr and "docs/configuration.md" in result.stderr
    shown = cli("config", "show")  # every section at once
    assert shown.returncode == 2 and f"{path}:3: sagemaker.regoin" in shown.stderr and f"{path}:5:" in shown.stderr


def test_a_file_others_may_write_or_in_a_folder_they_may_write_is_refused(cloudddp_home: Path, tmp_path: Path) -> None:
    path = write_config(cloudddp_home, mode=0o620)
    with pytest.raises(UnsafeFolder, match="writable by others"):
        load_spec(job_file(tmp_path))
    result = cli("validate", str(job_file(tmp_path)))
    assert result.returncode == 2 and "chmod 600" in result.stderr and "Traceback" not in result.stderr
    path.chmod(0o600)
    cloudddp_home.chmod(0o770)
    with pytest.raises(UnsafeFolder, match=r"folder .* is writable by others"):
        load_spec(job_file(tmp_path))
    cloudddp_home.chmod(0o700)
    assert load_spec(job_file(tmp_path)).section("sagemaker").role == ROLE


def test_cloudddp_config_naming_no_file_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUDDDP_CONFIG", str(tmp_path / "missing.yaml"))
    with pytest.raises(UserError, match=r"CLOUDDDP_CONFIG=.*missing\.yaml: no such file"):
        load_spec(job_file(tmp_path))


def test_config_path_and_show(cloudddp_home: Path) -> None:
    assert cli("config", "path").stdout.strip() == str(cloudddp_home / "config.yaml")
    assert json.loads(cli("config", "show", "--json").stdout)["found"] is False
    write_config(cloudddp_home)
    shown = json.loads(cli("config", "show", "--json").stdout)
    assert shown["backends"] == ["slurm", "sagemaker"] and shown["settings"]["sagemaker"]["role"] == ROLE
    assert "role: arn:aws:iam::111122223333:role/FromConfig" in cli("config", "show").stdout


def test_check_shows_the_file_and_each_configured_backend_s_settings(cloudddp_home: Path) -> None:
    assert "user configuration: none" in cli("check", "-b", "local").stdout
    path = write_config(cloudddp_home, "local:\n  device: cpu\n")
    result = cli("check", "-b", "local")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert f"user configuration: {path} (backends -b auto tries: local)" in text, text
    assert f"settings │ complete; local.device from {path}" in text, text


def test_an_unreadable_file_is_a_user_error(
    cloudddp_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The open is stubbed to fail as it does for a user without read permission (root, as on CI, reads any file)."""
    config = write_config(cloudddp_home)
    opened = userconfig.open_trusted

    def denied(path: Path, what: str, *, fix: str | None = None) -> tuple[int, Path]:
        if Path(path) == config:
            raise PermissionError(13, "Permission denied")
        return opened(path, what, fix=fix)

    monkeypatch.setattr(userconfig, "open_trusted", denied)
    with pytest.raises(UserError, match="cannot read the cloudddp configuration: Permission denied"):
        load_spec(job_file(tmp_path))


def test_loading_a_job_imports_no_backend_the_job_does_not_name(cloudddp_home: Path, tmp_path: Path) -> None:
    """The file's sections are read when their backend is used: a local render stays as light with one as without."""
    write_config(cloudddp_home)
    probe = (
        "import sys; from cloudddp.backends.plugins import load_spec; spec = load_spec(sys.argv[1]); "
        "print(sorted(m for m in sys.modules if m.count('.') == 2 and m.startswith('cloudddp.backends.')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, str(job_file(tmp_path))], capture_output=True, text=True, check=True
    )
    imported = result.stdout
    assert "cloudddp.backends.sagemaker'" in imported and "slurm" not in imported and "azureml" not in imported


def test_a_typo_in_backends_does_not_hide_the_sections_mistakes(cloudddp_home: Path, tmp_path: Path) -> None:
    """Every mistake of the file at once, each with its field and line: a person fixes them in one pass."""
    path = write_config(cloudddp_home, "backends: [slrum]\nsagemaker:\n  regoin: x\nslurm:\n  workdir: relative\n")
    shown = cli("config", "show")
    assert shown.returncode == 2 and "Traceback" not in shown.stderr, shown.stderr
    for problem in (
        "3 problems",
        f"{path}:1: backends[0]: no backend 'slrum'",
        f"{path}:3: sagemaker.regoin",
        f"{path}:5: slurm.workdir",
    ):
        assert problem in shown.stderr, shown.stderr
    with pytest.raises(UserError) as caught:
        load_spec(job_file(tmp_path))
    assert len(caught.value.problems) == 3  # type: ignore[attr-defined]
