"""The in-job reader of the frameworks' own log files, on files the real frameworks wrote."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cloudddp.injob import framework_logs
from cloudddp.injob.framework_logs import Watcher, roots
from cloudddp.observe.metrics import parse_line

CODE = Path(framework_logs.__file__).parent


def watching(*places: Path) -> tuple[Watcher, list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []
    return Watcher(list(places), seen.append), seen


def test_lightning_csv_rows_are_read_once_each_even_when_lightning_rewrites_the_header(tmp_path: Path) -> None:
    from lightning.pytorch.loggers import CSVLogger

    logger = CSVLogger(tmp_path)  # lightning_logs/version_0/metrics.csv, as a Trainer's default CSVLogger
    logger.log_hyperparams({"lr": 0.1})
    watcher, seen = watching(tmp_path)
    logger.log_metrics({"train_loss": 2.5, "epoch": 0}, step=0)
    logger.log_metrics({"train_loss": 2.0, "epoch": 0}, step=1)
    logger.save()
    watcher.look()
    assert seen == [{"step": 0, "epoch": 0, "train_loss": 2.5}, {"step": 1, "epoch": 0, "train_loss": 2.0}]
    logger.log_metrics({"val_acc": 0.75, "epoch": 0}, step=1)  # a new column: Lightning rewrites the whole file
    logger.log_metrics({"train_loss": 1.5, "epoch": 1}, step=2)
    logger.save()
    watcher.look()
    watcher.look()
    assert seen[2:] == [{"step": 1, "epoch": 0, "val_acc": 0.75}, {"step": 2, "epoch": 1, "train_loss": 1.5}]
    assert all(parse_line(framework_logs.metric_line(r)) is not None for r in seen)  # today's pipeline reads them


def test_rows_there_before_the_program_started_are_not_printed_again(tmp_path: Path) -> None:
    from lightning.pytorch.loggers import CSVLogger

    logger = CSVLogger(tmp_path, version=0)  # a resumed run's logger, writing on into the same version
    logger.log_metrics({"train_loss": 2.5}, step=0)
    logger.save()
    watcher, seen = watching(tmp_path)
    watcher.read_past()
    logger.log_metrics({"train_loss": 1.0}, step=5)
    logger.save()
    watcher.look()
    assert seen == [{"step": 5, "train_loss": 1.0}]


def test_a_half_written_row_waits_for_the_next_look_and_a_file_written_afresh_is_read_afresh(tmp_path: Path) -> None:
    folder = tmp_path / "lightning_logs" / "version_3"
    folder.mkdir(parents=True)
    (folder / "metrics.csv").write_text("epoch,step,loss\n0,0,1.5\n0,1,1.")
    watcher, seen = watching(tmp_path)
    watcher.look()
    assert seen == [{"step": 0, "epoch": 0, "loss": 1.5}]
    with open(folder / "metrics.csv", "a") as f:
        f.write("25\n")
    watcher.look()
    assert seen[1:] == [{"step": 1, "epoch": 0, "loss": 1.25}]
    (folder / "metrics.csv").write_text("epoch,step,loss\n0,0,7.0\n")  # written afresh (a run that starts over)
    watcher.look()
    assert seen[2:] == [{"step": 0, "epoch": 0, "loss": 7.0}]


def test_tensorboard_scalars_keep_their_step_and_time_and_are_read_on_from_where_they_were(tmp_path: Path) -> None:
    import torch
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(tmp_path / "runs" / "exp")  # what Lightning's TensorBoardLogger and HF's callback use
    watcher, seen = watching(tmp_path)
    writer.add_scalar("train/loss", 2.0, 10)
    writer.add_scalar("lr", 0.1, 10)
    writer.add_scalar("train/loss", 1.0, 20)
    writer.add_text("note", "not a number", 20)
    writer.add_histogram("weights", torch.arange(4.0), 20)
    writer.flush()
    watcher.look()
    assert [{k: v for k, v in r.items() if k != "time"} for r in seen] == [
        {"step": 10, "train/loss": 2.0, "lr": pytest.approx(0.1)},
        {"step": 20, "train/loss": 1.0},
    ]
    assert all(abs(r["time"] - __import__("time").time()) < 60 for r in seen)  # the event's wall time
    writer.add_scalar("train/loss", 0.5, 30)
    writer.close()
    watcher.look()
    assert [(r["step"], r["train/loss"]) for r in seen[2:]] == [(30, 0.5)]


def test_scalar_tensors_as_tensorflow_2_writes_them_are_read(tmp_path: Path) -> None:
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util import tensor_util

    def plugin(name: str) -> Any:
        return summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=name))

    as_bytes = tensor_pb2.TensorProto(dtype=types_pb2.DT_DOUBLE, tensor_content=struct.pack("<d", 2.5))
    tensors = [(1, tensor_util.make_tensor_proto(0.25)), (2, tensor_util.make_tensor_proto(3)), (3, as_bytes)]
    writer = EventFileWriter(str(tmp_path))
    for step, tensor in tensors:
        values = [
            summary_pb2.Summary.Value(tag="loss", tensor=tensor, metadata=plugin("scalars")),
            summary_pb2.Summary.Value(tag="other", tensor=tensor, metadata=plugin("hparams")),  # not a scalar's
        ]
        writer.add_event(event_pb2.Event(step=step, wall_time=1.0, summary=summary_pb2.Summary(value=values)))
    writer.close()
    watcher, seen = watching(tmp_path)
    watcher.look()
    assert seen == [{"step": s, "time": 1.0, "loss": v} for s, v in ((1, 0.25), (2, 3.0), (3, 2.5))]


def test_without_tensorboard_the_job_is_told_once_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(tmp_path) as writer:
        writer.add_scalar("loss", 1.0, 1)
    monkeypatch.setattr(framework_logs, "event_loader", lambda: None)
    watcher, seen = watching(tmp_path)
    watcher.look()
    watcher.look()
    assert seen == [] and capsys.readouterr().err.count("add `tensorboard` to code.requirements") == 1


def test_the_contract_folders_are_looked_in_once_each(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    env = {"CLOUDDDP_OUTPUT_DIR": str(tmp_path / "out"), "CLOUDDDP_TENSORBOARD_DIR": "/elsewhere/tb"}
    assert roots(env, tmp_path) == [tmp_path.resolve(), Path("/elsewhere/tb")]


def test_plain_csv_files_and_hidden_folders_are_not_read(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "metrics.csv").write_text("step,loss\n1,2\n")  # a dataset, not a logger's file
    (tmp_path / ".hidden" / "version_0").mkdir(parents=True)
    (tmp_path / ".hidden" / "version_0" / "metrics.csv").write_text("step,loss\n1,2\n")
    watcher, seen = watching(tmp_path)
    watcher.look()
    assert seen == []


@pytest.mark.parametrize(("rank", "printed"), [("0", True), ("1", False)])
def test_the_shipped_launcher_prints_the_rows_as_metric_lines_on_rank_0(
    tmp_path: Path, rank: str, printed: bool
) -> None:
    shutil.copy(CODE / "shim.py", tmp_path / "_cloudddp_launch.py")
    shutil.copy(CODE / "output_lines.py", tmp_path / "_cloudddp_lines.py")
    shutil.copy(CODE / "framework_logs.py", tmp_path / "_cloudddp_logs.py")
    old = tmp_path / "lightning_logs" / "version_0"
    old.mkdir(parents=True)
    (old / "metrics.csv").write_text("epoch,step,loss\n0,0,9.0\n")  # an earlier run's: not printed again
    program = (
        "import os; os.makedirs('lightning_logs/version_1'); "
        "open('lightning_logs/version_1/metrics.csv', 'w').write('epoch,step,loss\\n0,0,1.5\\n0,1,\\n1,2,0.5\\n')"
    )
    env = {**os.environ, "RANK": rank, "PYTHONPATH": ""}
    args = ["--cloudddp-00", json.dumps({"argv": ["-c", program], "python": True, "tag": True})]
    done = subprocess.run(
        [sys.executable, "_cloudddp_launch.py", *args], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    expected = [
        f'[rank{rank}]:CLOUDDDP_METRIC {{"step":0,"epoch":0,"loss":1.5}}',
        f'[rank{rank}]:CLOUDDDP_METRIC {{"step":2,"epoch":1,"loss":0.5}}',
    ]
    assert done.stdout.splitlines() == (expected if printed else [])


def test_rows_are_printed_while_the_program_runs_and_once_more_when_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(framework_logs, "EVERY", 0.05)
    folder = tmp_path / "lightning_logs" / "version_0"
    folder.mkdir(parents=True)
    log = folder / "metrics.csv"
    log.write_text("epoch,step,loss\n")
    watcher, seen = watching(tmp_path)
    watcher.read_past()
    watcher.start()
    with open(log, "a") as f:
        f.write("0,0,1.5\n")
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen == [{"step": 0, "epoch": 0, "loss": 1.5}]  # live, before the program ends
    monkeypatch.setattr(framework_logs, "EVERY", 3600.0)
    time.sleep(0.2)  # the thread now sleeps for an hour
    with open(log, "a") as f:
        f.write("0,1,1.0\n")
    watcher.stop()  # the last look, when the program has ended
    assert seen[1:] == [{"step": 1, "epoch": 0, "loss": 1.0}] and not watcher.thread.is_alive()
