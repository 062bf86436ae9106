"""Container images imported once to the shared filesystem: the rendered sbatch script run by bash with
stand-ins for Slurm's commands and for ``enroot``/``apptainer`` that count their calls. Two jobs starting
together import an image once; a later job with the same image imports nothing; every task runs the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudddp.backends.slurm.images import IMPORT_MARK, REUSE_MARK
from tests.backends.slurm.test_script_requeue import calls, finish, render, start

# Each import is counted, takes a moment (so two jobs starting together overlap), and writes its output file.
IMPORTERS = {
    "enroot": 'echo "$*" >> "$CALLS/import"; sleep 1; [ "$1 $2" = "import --output" ] && echo squashfs > "$3"',
    "apptainer": """case "$1" in
  pull) echo "$*" >> "$CALLS/import"; sleep 1; echo sif > "$2";;
  *) echo "unexpected apptainer $*" >&2; exit 9;;
esac""",
}


def job_folder(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    (folder / "bin").mkdir(parents=True)
    for command, body in IMPORTERS.items():
        (folder / "bin" / command).write_text("#!/bin/bash\n" + body + "\n")
        (folder / "bin" / command).chmod(0o755)
    return folder


@pytest.mark.parametrize(
    ("container", "suffix", "uses"),
    [
        ("{image: 'nvcr.io#nvidia/pytorch:24.05-py3'}", ".sqsh", "--container-image="),
        ("{image: 'docker://pytorch/pytorch:2.3.0', runtime: apptainer}", ".sif", "exec"),
    ],
)
def test_an_image_is_imported_once_for_concurrent_and_later_jobs_and_every_task_runs_the_file(
    tmp_path: Path, container: str, suffix: str, uses: str
) -> None:
    workdir = tmp_path / "shared"
    script = render(f"slurm.workdir={workdir}", f"slurm.container={container}")
    first, second, later = (job_folder(tmp_path, name) for name in ("first", "second", "later"))
    together = [start(script, first, SLURM_JOB_ID="7"), start(script, second, SLURM_JOB_ID="8")]
    results = [finish(proc) for proc in together]
    assert all(status == 0 for status, _ in results), results
    imports = calls(first, "import") + calls(second, "import")
    assert len(imports) == 1, (imports, results)
    assert sum(IMPORT_MARK in out for _, out in results) == 1, results
    images = sorted((workdir / "images").iterdir())
    files = [p for p in images if p.suffix == suffix]
    assert len(files) == 1 and files[0].stat().st_size > 0, images
    assert not [p for p in images if ".part-" in p.name], images  # the temporary name was renamed into place
    status, out = finish(start(script, later, SLURM_JOB_ID="9"))
    assert status == 0 and calls(later, "import") == [] and f"{REUSE_MARK} {files[0]}" in out, out
    for folder in (first, second, later):
        srun = calls(folder, "srun")
        image_args = [a for a in srun if str(files[0]) in a]
        assert image_args and all("://" not in a and "#" not in a for a in image_args), srun
        assert any(a == f"{uses}{files[0]}" or (a == str(files[0]) and uses in srun) for a in srun), srun


def test_a_failed_import_ends_the_job_and_leaves_no_file_a_later_job_would_trust(tmp_path: Path) -> None:
    workdir = tmp_path / "shared"
    script = render(f"slurm.workdir={workdir}", "slurm.container={image: 'nvcr.io#nvidia/pytorch:24.05-py3'}")
    broken = job_folder(tmp_path, "broken")
    (broken / "bin" / "enroot").write_text('#!/bin/bash\necho "$*" >> "$CALLS/import"; : > "$3"; exit 0\n')
    status, out = finish(start(script, broken))
    assert status == 1 and "importing the container image failed" in out and calls(broken, "srun") == [], out
    assert [p.name for p in (workdir / "images").iterdir() if not p.name.endswith(".lock")] == [], out
    retry = job_folder(tmp_path, "retry")
    status, out = finish(start(script, retry))
    assert status == 0 and len(calls(retry, "import")) == 1, out


def test_an_image_given_as_a_file_is_not_imported(tmp_path: Path) -> None:
    script = render(f"slurm.workdir={tmp_path}", "slurm.container={image: /shared/torch.sif, runtime: apptainer}")
    assert "apptainer pull" not in script and "flock" not in script
    folder = job_folder(tmp_path, "job")
    status, out = finish(start(script, folder))
    assert status == 0 and calls(folder, "import") == [] and "/shared/torch.sif" in calls(folder, "srun"), out
