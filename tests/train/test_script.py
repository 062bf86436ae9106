"""The shared training script, run for real (plain python and torchrun; no mocks of torch)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from cloudddp.observe import metrics as cloud_metrics
from tests.support.cli import ROOT
from tests.support.train_helpers import train, write_cifar10_batches

sys.path.insert(0, str(ROOT / "src_train"))
from ddptrain import checkpoint
from ddptrain import data as datasets
from ddptrain import metrics as script_metrics

pytestmark = pytest.mark.slow


class RunsCommand:
    """What a planted checkpoint may hold: an object whose unpickling runs a shell command."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (self.command,)


def records(stdout: str) -> list[dict]:
    return [
        json.loads(line.split(script_metrics.PREFIX, 1)[1])
        for line in stdout.splitlines()
        if script_metrics.PREFIX in line
    ]


def fake_cifar(
    n_train: int = 60, n_test: int = 20
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    mk = lambda n: (rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8), rng.integers(0, 10, n))  # noqa: E731
    return mk(n_train), mk(n_test)


def test_cifar10_loader_reads_the_real_pickle_format_from_folder_parent_and_targz(tmp_path: Path) -> None:
    import tarfile

    train_set, test_set = fake_cifar()
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar10_batches(folder, train_set, test_set)
    for root in (folder, tmp_path):
        ds = datasets.load_cifar10(root)
        assert ds.train_x.shape == (60, 3, 32, 32) and ds.train_x.dtype == torch.uint8
        assert torch.equal(ds.train_x, torch.from_numpy(train_set[0]))  # pixel order survives the round trip
        assert torch.equal(ds.test_y, torch.from_numpy(test_set[1]))
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname="cifar-10-batches-py")
    assert torch.equal(datasets.load_cifar10(archive).train_x, torch.from_numpy(train_set[0]))
    with pytest.raises(datasets.UsageError, match="no CIFAR-10 python batches"):
        datasets.load_cifar10(tmp_path / "nowhere")


def test_the_digits_are_scikit_learns_read_without_importing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images, labels = datasets.scikit_learn_digits()
    assert np.array_equal(images, bunch.images) and np.array_equal(labels, bunch.target)
    probe = "import sys; from ddptrain import data; data.scikit_learn_digits(); print('sklearn' in sys.modules)"
    shown = subprocess.run([sys.executable, "-c", probe], cwd=ROOT / "src_train", capture_output=True, text=True)
    assert shown.stdout.strip() == "False", shown.stderr[-2000:]
    # a scikit-learn whose data file is elsewhere: its own load_digits reads it
    elsewhere = tmp_path / "sklearn"
    elsewhere.mkdir()
    spec = datasets.importlib.util.spec_from_file_location("sklearn", elsewhere / "__init__.py")
    assert spec is not None
    spec.submodule_search_locations = [str(elsewhere)]
    monkeypatch.setattr(datasets.importlib.util, "find_spec", lambda name: spec)
    images, labels = datasets.scikit_learn_digits()
    assert np.array_equal(images, bunch.images) and np.array_equal(labels, bunch.target)


def test_metric_lines_match_cloudddp_parser_and_sagemaker_regexes() -> None:
    line = script_metrics.format_metric_line(12, 3, train_loss=0.5, test_acc=0.975, lr=1e-5)
    assert line.startswith(cloud_metrics.PREFIX)
    record = cloud_metrics.parse_metric_line("[default0]:" + line)
    assert record is not None and record.step == 12 and record.epoch == 3
    assert record.values == {"train_loss": 0.5, "test_acc": 0.975, "lr": 1e-5}
    for name, value in record.values.items():
        match = re.search(cloud_metrics.metric_regex(name), line)
        assert match and float(match.group(1)) == value


def test_digits_two_processes_reach_95_percent(tmp_path: Path) -> None:
    result = train(
        2,
        "--dataset",
        "digits",
        "--epochs",
        "12",
        "--checkpoint-dir",
        str(tmp_path / "ck"),
        "--model-dir",
        str(tmp_path / "out"),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    recs = records(result.stdout)
    accs = [r["test_acc"] for r in recs if "test_acc" in r]
    assert len(accs) == 12 and accs[-1] >= 0.95, accs
    assert (tmp_path / "out" / "model.pt").exists()


def test_resume_continues_at_the_next_epoch_and_corrupt_checkpoints_are_skipped(tmp_path: Path) -> None:
    common = ["--dataset", "digits", "--checkpoint-dir", str(tmp_path / "ck"), "--model-dir", str(tmp_path / "out")]
    first = train(1, *common, "--epochs", "3", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert [r["epoch"] for r in records(first.stdout) if "train_loss" in r] == [1, 2, 3]
    names = [p.name for p in checkpoint.candidates(tmp_path / "ck")]
    assert names == ["ckpt-e0003-s0000000.pt", "ckpt-e0002-s0000000.pt"]  # the newest two are kept
    # Truncate the newest: the script must warn and resume from the one before.
    newest = tmp_path / "ck" / names[0]
    newest.write_bytes(newest.read_bytes()[:100])
    # And plant a newer one that runs a command when unpickled, with a checksum that matches: refused by name.
    marker = tmp_path / "planted-code-ran"
    planted = tmp_path / "ck" / "ckpt-e9999-s0000000.pt"
    torch.save({"model": RunsCommand(f"touch {marker}"), "epoch": 9999}, planted)
    checkpoint.digest_file(planted).write_text(hashlib.sha256(planted.read_bytes()).hexdigest())
    second = train(1, *common, "--epochs", "5", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "refusing checkpoint ckpt-e9999-s0000000.pt" in second.stderr and not marker.exists()
    assert "checksum mismatch" in second.stderr
    assert "resumed from" in second.stdout and "at epoch 3" in second.stdout
    assert [r["epoch"] for r in records(second.stdout) if "train_loss" in r] == [3, 4, 5]


def test_checkpoint_without_checksum_is_ignored(tmp_path: Path) -> None:
    state = {"x": torch.arange(3)}
    checkpoint.save(tmp_path, 1, 0, state)
    torn = checkpoint.save(tmp_path, 2, 0, {"x": torch.arange(5)})
    torn.with_name(torn.name + ".sha256").unlink()  # killed between the payload and its checksum
    path, loaded = checkpoint.load_latest(tmp_path)  # type: ignore[misc]
    assert path.name == "ckpt-e0001-s0000000.pt" and torch.equal(loaded["x"], torch.arange(3))


def test_sharded_evaluation_equals_single_process(tmp_path: Path) -> None:
    args = ["--dataset", "digits", "--epochs", "2", "--deterministic", "--checkpoint-every", "0", "--model-dir"]
    two = train(2, *args, str(tmp_path / "b"), "--global-batch-size", "64", cwd=tmp_path)
    assert two.returncode == 0, two.stderr[-2000:]
    # Rank 0's final weights evaluated here, in one process: the 2 ranks' sharded, summed accuracy must equal it.
    sd = torch.load(tmp_path / "b" / "model.pt")
    from ddptrain import models

    model = models.build("cnn", 1, 10)
    model.load_state_dict(sd)
    model.eval()
    ds = datasets.load_digits(None)
    scaled = ds.train_x[:4096].float() / 255
    mean = scaled.mean(dim=(0, 2, 3)).view(1, -1, 1, 1)
    std = scaled.std(dim=(0, 2, 3)).clamp_min(1e-3).view(1, -1, 1, 1)
    with torch.no_grad():
        acc = (model(((ds.test_x.float() / 255) - mean) / std).argmax(1) == ds.test_y).float().mean().item()
    reported = [r["test_acc"] for r in records(two.stdout) if "test_acc" in r][-1]
    assert abs(reported - acc) < 1e-6, (reported, acc)


def test_bad_arguments_exit_2_with_one_line(tmp_path: Path) -> None:
    result = train(1, "--dataset", "cifar10", "--data-dir", str(tmp_path / "none"), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().startswith("error: no CIFAR-10 python batches") and "Traceback" not in result.stderr


def test_checkpoint_minutes_writes_checkpoints_mid_epoch_and_the_epoch_goes_on(tmp_path: Path) -> None:
    """checkpoint.every_minutes: rank 0's clock says a checkpoint is due, every rank agrees in the step's
    collective, rank 0 writes where the run is, and training carries on in the same epoch."""
    common = ["--dataset", "digits", "--checkpoint-dir", str(tmp_path / "ck"), "--model-dir", str(tmp_path / "out")]
    run = train(2, *common, "--epochs", "2", "--checkpoint-minutes", "0.0005", cwd=tmp_path)  # every 30 ms
    assert run.returncode == 0, run.stderr[-3000:]
    written = re.findall(r"checkpoint (ckpt-e(\d{4})-s(\d{7})\.pt)", run.stdout)
    mid_epoch = [name for name, _, step in written if int(step) > 0]
    assert mid_epoch, run.stdout[-3000:]
    assert written[-1][0] == "ckpt-e0002-s0000000.pt"  # the epoch ends are still written
    assert [r["epoch"] for r in records(run.stdout) if "train_loss" in r] == [1, 2]  # both epochs whole
    off = train(1, *common[:2], "--checkpoint-dir", str(tmp_path / "ck2"), "--epochs", "1", cwd=tmp_path)
    assert off.returncode == 0 and not re.search(r"ckpt-e\d{4}-s0*[1-9]", off.stdout)  # 0 (default): epoch ends only
