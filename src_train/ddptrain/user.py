"""YOUR MODEL AND DATA GO HERE: the one file to edit to train your own network with this script.

- ``add_arguments``: your own command-line options; they arrive in ``args`` (``--my-opt`` → ``args.my_opt``).
- ``build_data``: return a ``data.Dataset``: train and test samples (tensors in memory, or ``images.Images``
  read from files batch by batch), int64 class labels, and the number of classes; ``--data-path`` moves them
  to the device whole or streams them through a ``DataLoader`` (feed.py). Subclass it to change how a batch
  becomes model input (``data.ImageDataset`` augments and normalizes uint8 images). ``args.data_dir``
  is your data folder (``--data-dir``; on a cloud job the input that cloudddp passes with it).
- ``build_model``: return your ``torch.nn.Module``: it gets a batch from ``dataset.train_inputs`` and
  returns class scores of shape (batch, num_classes); it is trained with cross-entropy.

Everything else stays as it is: the process group, sharding, checkpoints and resume, SIGTERM handling,
sharded evaluation, metric lines (and MLflow), and the final ``model.pt`` (your model's state_dict).
"""

from __future__ import annotations

import argparse

from torch import nn

from . import data, models


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--dataset", choices=["digits", "cifar10", "synthetic", "imagefolder"], default="digits")
    group.add_argument("--model", choices=["cnn", "resnet18", "resnet18-imagenet"], default="cnn")
    group.add_argument("--synthetic-size", type=int, default=5000, help="training samples of --dataset synthetic")


def build_data(args: argparse.Namespace) -> data.Dataset:
    return data.load(args.dataset, args.data_dir, args.synthetic_size, args.seed)


def build_model(args: argparse.Namespace, dataset: data.Dataset) -> nn.Module:
    return models.build(args.model, in_channels=dataset.train_x.shape[1], num_classes=dataset.num_classes)
