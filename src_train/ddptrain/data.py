"""Datasets: :class:`Dataset` (what the training loop needs), :class:`ImageDataset` (uint8 images with
augmentation on the device), and the four image sets:

- ``cifar10``: the standard python pickle batches (``cifar-10-batches-py/data_batch_1..5``,
  ``test_batch``; the format inside cifar-10-python.tar.gz), read without torchvision. ``--data-dir``
  may point at the batch folder, its parent, or the .tar.gz itself.
- ``digits``: scikit-learn's digits (1,797 real 8×8 handwritten digits that ship inside its wheel), split 80/20
  with a fixed seed; or a ``digits.npz`` (images, labels) in ``--data-dir``.
- ``synthetic``: deterministic CIFAR-shaped data with a learnable signal, for benchmarks and tests.
- ``imagefolder``: folders of image files, ``train/<class>/*`` and ``test/<class>/*`` (images.py): read batch by
  batch by the streaming data path (feed.py), or all at once by the device path.

The first three are held whole in memory; the data path (``--data-path``, feed.py) then either moves them to
the device whole or streams them batch by batch through a ``DataLoader``.
"""

from __future__ import annotations

import gzip
import importlib.util
import pickle
import tarfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch

from . import augment
from .distributed import UsageError
from .images import Images, scan

_D = TypeVar("_D", bound="Dataset")


@dataclass
class Dataset:
    """A classification dataset: what the training loop needs.

    ``train_x``/``test_x`` hold one sample per index of dim 0 (a tensor, or :class:`Images` read from files
    when indexed); ``train_y``/``test_y`` are int64 class labels in ``[0, num_classes)``. The data path
    (feed.py) indexes batches of raw samples and calls :meth:`train_inputs` / :meth:`test_inputs` on the device to
    turn them into the model's float input; override them for your own augmentation and normalization
    (:class:`ImageDataset` does it for uint8 images).
    """

    train_x: torch.Tensor | Images
    train_y: torch.Tensor
    test_x: torch.Tensor | Images
    test_y: torch.Tensor
    num_classes: int

    def to(self: _D, device: torch.device) -> _D:
        """The whole dataset on ``device`` (image files are read into memory first): the device data path."""
        move = lambda t: (t.load() if isinstance(t, Images) else t).to(device, non_blocking=True)  # noqa: E731
        return replace(
            self,
            train_x=move(self.train_x),
            train_y=move(self.train_y),
            test_x=move(self.test_x),
            test_y=move(self.test_y),
        )

    def train_inputs(self, x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        """A training batch as model input; ``g`` is the step's seeded generator for random augmentation."""
        return x.float()

    def test_inputs(self, x: torch.Tensor) -> torch.Tensor:
        return x.float()


@dataclass
class ImageDataset(Dataset):
    """uint8 images (N, C, H, W): random translation (and flips) for training, per-channel normalization."""

    flip: bool = False  # horizontal flips are a valid augmentation (not for digits)
    pad: int = 0  # translate augmentation range, pixels
    mean: torch.Tensor = field(init=False, repr=False)
    std: torch.Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        scaled = self.train_x[:4096].float() / 255
        self.mean = scaled.mean(dim=(0, 2, 3)).view(1, -1, 1, 1)
        self.std = scaled.std(dim=(0, 2, 3)).clamp_min(1e-3).view(1, -1, 1, 1)

    def train_inputs(self, x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        x = augment.translate_flip(x, self.pad, self.flip, g)
        return augment.normalize(x, *self._stats(x.device), torch.float32)

    def test_inputs(self, x: torch.Tensor) -> torch.Tensor:
        return augment.normalize(x, *self._stats(x.device), torch.float32)

    def _stats(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The normalization on the batches' device (the stream path leaves the dataset, and them, on the host)."""
        if self.mean.device != device:
            self.mean, self.std = self.mean.to(device), self.std.to(device)
        return self.mean, self.std


def _unpickle(raw: bytes) -> tuple[np.ndarray, np.ndarray]:
    batch = pickle.loads(raw, encoding="bytes")
    data = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
    labels = np.asarray(batch.get(b"labels", batch.get(b"fine_labels")), dtype=np.int64)
    return data, labels


def _cifar_files(root: Path) -> dict[str, bytes]:
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    if root.is_file() and root.name.endswith((".tar.gz", ".tgz")):
        with tarfile.open(root) as tar:
            members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
            missing = [n for n in names if n not in members]
            if missing:
                raise UsageError(f"{root} has no CIFAR-10 batches {missing}")
            return {n: tar.extractfile(members[n]).read() for n in names}  # type: ignore[union-attr]
    for folder in (root, root / "cifar-10-batches-py"):
        if all((folder / n).is_file() for n in names):
            return {n: (folder / n).read_bytes() for n in names}
    archive = root / "cifar-10-python.tar.gz"
    if archive.is_file():
        return _cifar_files(archive)
    raise UsageError(
        f"no CIFAR-10 python batches under {root} (expected data_batch_1..5 and test_batch, "
        "cifar-10-batches-py/, or cifar-10-python.tar.gz)"
    )


def load_cifar10(root: Path) -> ImageDataset:
    files = _cifar_files(root)
    parts = [_unpickle(files[f"data_batch_{i}"]) for i in range(1, 6)]
    test_x, test_y = _unpickle(files["test_batch"])
    train_x = np.concatenate([p[0] for p in parts])
    train_y = np.concatenate([p[1] for p in parts])
    return ImageDataset(
        torch.from_numpy(train_x),
        torch.from_numpy(train_y),
        torch.from_numpy(test_x),
        torch.from_numpy(test_y),
        10,
        flip=True,
        pad=4,
    )


def load_digits(root: Path | None) -> ImageDataset:
    if root is not None and (root / "digits.npz").is_file():
        with np.load(root / "digits.npz") as npz:
            images, labels = npz["images"], npz["labels"]
    else:
        images, labels = scikit_learn_digits()
    images = np.clip(np.asarray(images, dtype=np.float64) * 16, 0, 255).astype(np.uint8)[:, None]
    labels = np.asarray(labels, dtype=np.int64)
    order = np.random.default_rng(1234).permutation(len(labels))
    cut = int(0.8 * len(labels))
    tr, te = order[:cut], order[cut:]
    return ImageDataset(
        torch.from_numpy(images[tr]),
        torch.from_numpy(labels[tr]),
        torch.from_numpy(images[te]),
        torch.from_numpy(labels[te]),
        10,
        flip=False,
        pad=1,
    )


def scikit_learn_digits() -> tuple[np.ndarray, np.ndarray]:
    """``sklearn.datasets.load_digits()``'s images and targets, read from the CSV file it reads, without importing
    scikit-learn: ``sklearn.datasets`` takes about a second of CPU to import (scipy with it), in every rank. Where
    the file is not at its place (another layout of the package), scikit-learn's own function reads it."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError("--dataset digits needs scikit-learn, or --data-dir with a digits.npz")
    csv = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "digits.csv.gz"
    if not csv.is_file():
        from sklearn.datasets import load_digits as sk_digits

        bunch = sk_digits()
        return bunch.images, bunch.target
    with gzip.open(csv, "rt") as rows:
        table = np.loadtxt(rows, delimiter=",")
    return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(np.int64)


def load_synthetic(size: int, seed: int = 0) -> ImageDataset:
    """Class-dependent colour blobs plus noise: learnable, deterministic, CIFAR-shaped."""
    g = torch.Generator().manual_seed(seed)
    n_test = max(10, size // 5)
    labels = torch.randint(0, 10, (size + n_test,), generator=g)
    base = torch.rand(10, 3, 32, 32, generator=g)
    noise = torch.rand(size + n_test, 3, 32, 32, generator=g)
    images = (0.6 * base[labels] + 0.4 * noise).mul(255).to(torch.uint8)
    return ImageDataset(images[:size], labels[:size], images[size:], labels[size:], 10, flip=True, pad=4)


def load_imagefolder(root: Path) -> ImageDataset:
    """``root/train/<class>/*`` and ``root/test/<class>/*``: flips, and translation by up to 1/8 of the width."""
    train_files, train_labels, classes = scan(root, "train")
    test_files, test_labels, _ = scan(root, "test", classes)
    train_x = Images(train_files)
    return ImageDataset(
        train_x,
        torch.tensor(train_labels),
        Images(test_files),
        torch.tensor(test_labels),
        len(classes),
        flip=True,
        pad=max(1, train_x.shape[3] // 8),
    )


def load(name: str, data_dir: str | None, synthetic_size: int, seed: int) -> ImageDataset:
    if name == "cifar10":
        if not data_dir:
            raise UsageError("--dataset cifar10 needs --data-dir (in a job spec: an input with `arg: --data-dir`)")
        return load_cifar10(Path(data_dir))
    if name == "imagefolder":
        if not data_dir:
            raise UsageError("--dataset imagefolder needs --data-dir (a folder with train/<class>/ and test/<class>/)")
        return load_imagefolder(Path(data_dir))
    if name == "digits":
        return load_digits(Path(data_dir) if data_dir else None)
    return load_synthetic(synthetic_size, seed)
