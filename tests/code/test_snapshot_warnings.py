"""A render says when the code snapshot is large: how large, its biggest files and how to leave each out."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.support.cli import cli


def test_sagemaker_render_of_a_folder_with_a_large_file_warns_with_its_name_size_and_ignore_line(
    tmp_path: Path,
) -> None:
    code = tmp_path / "code"
    (code / "runs").mkdir(parents=True)
    (code / "train.py").write_text("print('train')\n")
    (code / "runs" / "epoch 9.ckpt").write_bytes(os.urandom(51_000_000))  # random: compresses to ~51 MB
    spec = tmp_path / "job.json"
    spec.write_text(
        json.dumps(
            {
                "name": "big-code",
                "code": {"dir": "code"},
                "resources": {"nodes": 1, "gpus_per_node": 1},
                "sagemaker": {
                    "region": "us-east-1",
                    "role": "arn:aws:iam::123456789012:role/r",
                    "bucket": "b",
                    "instance_type": "ml.g5.xlarge",
                    "image": "img:1",
                },
            }
        )
    )
    result = cli("render", str(spec), "-b", "sagemaker")
    assert result.returncode == 0, result.stderr
    warning = result.stderr[result.stderr.index("warning: the code snapshot") :]
    assert "51.0 MB  runs/epoch 9.ckpt  /runs/epoch 9.ckpt" in warning, warning
    assert str(code / ".cloudddpignore") in warning and "code.ignore" in warning

    (code / ".cloudddpignore").write_text("/runs/epoch 9.ckpt\n")  # the advice, followed
    quiet = cli("render", str(spec), "-b", "sagemaker")
    assert quiet.returncode == 0 and "code snapshot" not in quiet.stderr, quiet.stderr
