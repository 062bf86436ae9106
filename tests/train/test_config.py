"""Where the shared training script takes its folders and settings from: arguments, then the runtime
contract's variables, then defaults for a person running ``python train.py`` by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from tests.support.cli import ROOT
from tests.support.train_helpers import train

sys.path.insert(0, str(ROOT / "src_train"))
from ddptrain import config

CONTRACT_ENV = {
    "CLOUDDDP_MODEL_DIR": "/job/model",
    "CLOUDDDP_CHECKPOINT_DIR": "/job/ck",
    "CLOUDDDP_RESUME": "never",
    "CLOUDDDP_CHECKPOINT_EVERY": "3",
    "CLOUDDDP_DIST_BACKEND": "gloo",
    "CLOUDDDP_COLLECTIVE_TIMEOUT": "42.5",
    "CLOUDDDP_INPUT_TRAIN": "/job/inputs/train",
}


def test_a_plain_run_uses_folders_next_to_it_and_no_data_dir() -> None:
    args = config.parse_args([], env={})
    assert (
        args.model_dir,
        args.checkpoint_dir,
        args.resume,
        args.checkpoint_every,
        args.dist_backend,
        args.collective_timeout,
        args.data_dir,
    ) == ("./outputs", "./checkpoints", "auto", 1, "auto", 600.0, None)


def test_the_runtime_contract_fills_what_the_command_line_leaves_out() -> None:
    args = config.parse_args([], env=CONTRACT_ENV)
    assert (
        args.model_dir,
        args.checkpoint_dir,
        args.resume,
        args.checkpoint_every,
        args.dist_backend,
        args.collective_timeout,
        args.data_dir,
    ) == ("/job/model", "/job/ck", "never", 3, "gloo", 42.5, "/job/inputs/train")


def test_the_command_line_wins_over_the_environment() -> None:
    argv = [
        "--model-dir",
        "m",
        "--checkpoint-dir",
        "c",
        "--resume",
        "auto",
        "--checkpoint-every",
        "0",
        "--dist-backend",
        "nccl",
        "--collective-timeout",
        "7",
        "--data-dir",
        "d",
    ]
    args = config.parse_args(argv, env=CONTRACT_ENV)
    assert (
        args.model_dir,
        args.checkpoint_dir,
        args.resume,
        args.checkpoint_every,
        args.dist_backend,
        args.collective_timeout,
        args.data_dir,
    ) == ("m", "c", "auto", 0, "nccl", 7.0, "d")


def test_an_input_is_the_data_dir_only_when_it_is_the_only_one() -> None:
    two = {"CLOUDDDP_INPUT_TRAIN": "/a", "CLOUDDDP_INPUT_LABELS": "/b"}
    assert config.parse_args([], env=two).data_dir is None  # ambiguous: the job must say --data-dir
    assert config.parse_args([], env={"CLOUDDDP_INPUT_TRAIN": "/a"}).data_dir == "/a"


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("CLOUDDDP_RESUME", "sometimes", "CLOUDDDP_RESUME='sometimes' is not one of auto, never (or pass --resume)"),
        ("CLOUDDDP_CHECKPOINT_EVERY", "often", "CLOUDDDP_CHECKPOINT_EVERY='often' is not a number"),
        ("CLOUDDDP_CHECKPOINT_EVERY", "-1", "--checkpoint-every must be 0 (never) or more"),
        ("CLOUDDDP_DIST_BACKEND", "mpi", "CLOUDDDP_DIST_BACKEND='mpi' is not one of auto, nccl, gloo, smddp"),
        ("CLOUDDDP_COLLECTIVE_TIMEOUT", "0", "--collective-timeout must be more than 0 seconds"),
    ],
)
def test_a_bad_contract_value_exits_2_naming_the_variable(
    variable: str, value: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        config.parse_args([], env={variable: value})
    assert exit_info.value.code == 2
    assert says in capsys.readouterr().err


def test_no_backend_specific_fallbacks_are_left_in_the_script() -> None:
    source = "\n".join(p.read_text() for p in (ROOT / "src_train").rglob("*.py"))
    for name in ("SM_CHANNEL_TRAIN", "SM_MODEL_DIR", "/opt/ml/checkpoints", "CLOUDDDP_DATA_DIR", "CLOUDDDP_OUTPUT_DIR"):
        assert name not in source, name


@pytest.mark.slow
def test_python_train_py_run_by_hand_writes_outputs_and_checkpoints_in_its_folder(tmp_path: Path) -> None:
    result = train(
        1,
        "--epochs",
        "1",
        "--batch-size",
        "256",
        cwd=tmp_path,
        env={name: "" for name in CONTRACT_ENV} | {"MLFLOW_TRACKING_URI": ""},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "done: 1 epochs" in result.stdout
    assert set(torch.load(tmp_path / "outputs" / "model.pt")) >= {"head.weight", "head.bias"}
    assert [p.name for p in (tmp_path / "checkpoints").glob("*.pt")] == ["ckpt-e0001-s0000000.pt"]
