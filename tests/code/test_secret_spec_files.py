"""A spec file in ``code.dir`` that holds a literal ``secret: true`` value never leaves the machine:
``cloudddp init`` puts job.yaml in the code folder, so the snapshot, its upload and the run's code folder would
carry the value."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

from cloudddp.api import Job
from cloudddp.backends.status import RunState
from cloudddp.code.snapshot import cache_dir
from cloudddp.runtime import code_snapshot, packed, snapshot_upload
from tests.support.cli import FIXTURES, cli

CANARY = "canary-literal-4f0c2a9e"


def code_folder(tmp_path: Path) -> Path:
    """The tiny job's folder with its spec holding a literal secret (a copy beside it holds it too)."""
    folder = tmp_path / "job"
    shutil.copytree(FIXTURES / "tinyjob", folder)
    spec = (folder / "job.yaml").read_text() + f"env:\n  API_TOKEN: {{value: {CANARY}, secret: true}}\n"
    (folder / "job.yaml").write_text(spec)
    (folder / "configs").mkdir()
    (folder / "configs" / "prod.yml").write_text(f"token: {CANARY}\n")
    (folder / "notes.yaml").write_text("nothing secret here\n")
    return folder


def archive_bytes(path: Path) -> tuple[list[str], bytes]:
    with tarfile.open(path, "r:gz") as tar:
        names = tar.getnames()
        data = b"".join(f.read() for m in tar.getmembers() if m.isfile() and (f := tar.extractfile(m)) is not None)
    return names, data


def test_spec_files_holding_a_literal_secret_are_left_out_with_a_warning_and_listed(tmp_path: Path) -> None:
    folder = code_folder(tmp_path)
    spec = Job.load(folder / "job.yaml").spec
    snapshot = code_snapshot(spec)
    assert snapshot.secrets_left_out == ("configs/prod.yml", "job.yaml")
    names, data = archive_bytes(snapshot.path)
    assert "train.py" in names and "notes.yaml" in names and "job.yaml" not in names
    assert CANARY.encode() not in data
    # the upload, packed again from the folder (the cache pruned since render): the same archive, still without it
    upload = snapshot_upload(spec, snapshot, "s3://bucket/code")
    shutil.rmtree(cache_dir())
    again = packed(upload)
    assert again.name == f"{snapshot.sha256}.tar.gz" and CANARY.encode() not in archive_bytes(again)[1]

    listed = cli("render", str(folder / "job.yaml"), "--list-files")
    assert listed.returncode == 0, listed.stderr
    assert "job.yaml" not in listed.stdout.split() and "train.py" in listed.stdout.split()
    assert "left out of the code snapshot: job.yaml, which holds the literal value" in " ".join(listed.stderr.split())
    as_json = json.loads(cli("render", str(folder / "job.yaml"), "--list-files", "--json").stdout)
    assert as_json["left_out_for_secrets"] == ["configs/prod.yml", "job.yaml"]


def test_without_literal_secrets_the_spec_ships_with_the_code(tmp_path: Path) -> None:
    spec = Job.load(FIXTURES / "tinyjob" / "job.yaml").spec
    snapshot = code_snapshot(spec)
    assert "job.yaml" in snapshot.files and snapshot.secrets_left_out == ()


@pytest.mark.slow
def test_a_local_run_of_such_a_folder_has_the_secret_in_no_file(tmp_path: Path, cloudddp_home: Path) -> None:
    folder = code_folder(tmp_path)
    run = Job.load(folder / "job.yaml", ["code.args=[--epochs, 1]"]).submit("local")
    status = run.wait(timeout=120, poll=0.2)
    assert status.state is RunState.SUCCEEDED, status
    code = Path(status.details["run_dir"]) / "code"
    assert (code / "train.py").exists() and not (code / "job.yaml").exists()
    holding = [p for p in cloudddp_home.rglob("*") if p.is_file() and CANARY.encode() in p.read_bytes()]
    assert holding == []
