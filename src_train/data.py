"""Datasets as whole uint8 tensors (N, C, H, W) plus int64 labels: small enough to live on the device.

- ``cifar10``: the standard python pickle batches (``cifar-10-batches-py/data_batch_1..5``,
  ``test_batch``; the format inside cifar-10-python.tar.gz), read without torchvision. ``--data-dir``
  may point at the batch folder, its parent, or the .tar.gz itself.
- ``digits``: scikit-learn's ``load_digits`` (1,797 real 8×8 handwritten digits that ship inside the
  wheel), split 80/20 with a fixed seed; or a ``digits.npz`` (images, labels) in ``--data-dir``.
- ``synthetic``: deterministic CIFAR-shaped data with a learnable signal, for benchmarks and tests.
"""

from __future__ import annotations

import pickle
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from distributed import UsageError


@dataclass
class Dataset:
    train_x: torch.Tensor  # uint8 (N, C, H, W)
    train_y: torch.Tensor  # int64 (N,)
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    flip: bool  # horizontal flips are a valid augmentation (not for digits)
    pad: int  # translate augmentation range, pixels

    def to(self, device: torch.device) -> Dataset:
        move = lambda t: t.to(device, non_blocking=True)  # noqa: E731
        return Dataset(move(self.train_x), move(self.train_y), move(self.test_x), move(self.test_y),
                       self.num_classes, self.flip, self.pad)


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


def load_cifar10(root: Path) -> Dataset:
    files = _cifar_files(root)
    parts = [_unpickle(files[f"data_batch_{i}"]) for i in range(1, 6)]
    test_x, test_y = _unpickle(files["test_batch"])
    train_x = np.concatenate([p[0] for p in parts])
    train_y = np.concatenate([p[1] for p in parts])
    return Dataset(torch.from_numpy(train_x), torch.from_numpy(train_y), torch.from_numpy(test_x),
                   torch.from_numpy(test_y), 10, flip=True, pad=4)


def load_digits(root: Path | None) -> Dataset:
    if root is not None and (root / "digits.npz").is_file():
        with np.load(root / "digits.npz") as npz:
            images, labels = npz["images"], npz["labels"]
    else:
        try:
            from sklearn.datasets import load_digits as sk_digits
        except ImportError:
            raise UsageError("--dataset digits needs scikit-learn, or --data-dir with a digits.npz") from None
        bunch = sk_digits()
        images, labels = bunch.images, bunch.target
    images = np.clip(np.asarray(images, dtype=np.float64) * 16, 0, 255).astype(np.uint8)[:, None]
    labels = np.asarray(labels, dtype=np.int64)
    order = np.random.default_rng(1234).permutation(len(labels))
    cut = int(0.8 * len(labels))
    tr, te = order[:cut], order[cut:]
    return Dataset(torch.from_numpy(images[tr]), torch.from_numpy(labels[tr]), torch.from_numpy(images[te]),
                   torch.from_numpy(labels[te]), 10, flip=False, pad=1)


def load_synthetic(size: int, seed: int = 0) -> Dataset:
    """Class-dependent colour blobs plus noise: learnable, deterministic, CIFAR-shaped."""
    g = torch.Generator().manual_seed(seed)
    n_test = max(10, size // 5)
    labels = torch.randint(0, 10, (size + n_test,), generator=g)
    base = torch.rand(10, 3, 32, 32, generator=g)
    noise = torch.rand(size + n_test, 3, 32, 32, generator=g)
    images = (0.6 * base[labels] + 0.4 * noise).mul(255).to(torch.uint8)
    return Dataset(images[:size], labels[:size], images[size:], labels[size:], 10, flip=True, pad=4)


def load(name: str, data_dir: str | None, synthetic_size: int, seed: int) -> Dataset:
    if name == "cifar10":
        if not data_dir:
            raise UsageError("--dataset cifar10 needs --data-dir (or SM_CHANNEL_TRAIN / CLOUDDDP_DATA_DIR)")
        return load_cifar10(Path(data_dir))
    if name == "digits":
        return load_digits(Path(data_dir) if data_dir else None)
    return load_synthetic(synthetic_size, seed)


def write_cifar10_batches(folder: Path, train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray]) -> None:
    """Write arrays in the real CIFAR-10 python format (used by tests and benchmarks)."""
    folder.mkdir(parents=True, exist_ok=True)
    chunks = np.array_split(np.arange(len(train[1])), 5)
    for i, idx in enumerate(chunks, 1):
        blob = {b"batch_label": f"training batch {i} of 5".encode(), b"labels": train[1][idx].tolist(),
                b"data": train[0][idx].reshape(len(idx), -1), b"filenames": [b"x.png"] * len(idx)}
        (folder / f"data_batch_{i}").write_bytes(pickle.dumps(blob, protocol=2))
    blob = {b"batch_label": b"testing batch 1 of 1", b"labels": test[1].tolist(),
            b"data": test[0].reshape(len(test[1]), -1), b"filenames": [b"x.png"] * len(test[1])}
    (folder / "test_batch").write_bytes(pickle.dumps(blob, protocol=2))


