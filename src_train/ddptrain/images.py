"""Folders of image files, ImageFolder-style, read without torchvision: ``--dataset imagefolder``.

``--data-dir`` holds ``train/<class>/<image>`` and ``test/<class>/<image>`` (CIFAR-10 as PNG files, for example:
``train/airplane/0001.png``); the classes are the sorted folder names of ``train/``, the files of each class are
taken in sorted order. Every image must have the same size and channels. Files are read with Pillow where it is
installed; without it, 8-bit PNGs (grey, grey+alpha, RGB, RGBA; not interlaced) are decoded with numpy and zlib.

:class:`Images` is what ``Dataset.train_x`` / ``test_x`` hold for such a folder: indexed like a uint8 tensor
(N, C, H, W), it reads the files of the indexed samples. The streaming data path reads them batch by batch in
``DataLoader`` workers; the device path reads them all once (:meth:`Images.load`) and keeps them on the device.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import torch

from .distributed import UsageError

SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".ppm", ".pgm", ".webp")
_CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}  # PNG colour type -> channels (8-bit, no palette)


class Images:
    """Image files as a lazily read uint8 tensor of shape (N, C, H, W)."""

    def __init__(self, files: list[Path]) -> None:
        self.files = files
        first = read_image(files[0])
        self.shape = torch.Size((len(files), *first.shape))

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: slice | torch.Tensor | list[int]) -> torch.Tensor:
        picked = range(len(self.files))[index] if isinstance(index, slice) else torch.as_tensor(index).tolist()
        return torch.stack([self._read(i) for i in picked]) if picked else torch.empty(0, *self.shape[1:])

    def _read(self, i: int) -> torch.Tensor:
        image = read_image(self.files[i])
        if image.shape != self.shape[1:]:
            raise UsageError(
                f"{self.files[i]} is {tuple(image.shape)} (channels, height, width), not {tuple(self.shape[1:])} "
                f"like {self.files[0]}: every image of --dataset imagefolder must have the same size and channels"
            )
        return image

    def load(self) -> torch.Tensor:
        """Every image, read into memory (the device path)."""
        return self[:]


def read_image(path: Path) -> torch.Tensor:
    """One image file as a uint8 tensor (C, H, W)."""
    try:
        from PIL import Image
    except ImportError:
        array = _decode_png(path)
    else:
        with Image.open(path) as im:
            array = np.asarray(im.convert("RGB") if im.mode not in ("L", "RGB", "RGBA") else im)
    if array.ndim == 2:
        array = array[:, :, None]
    return torch.from_numpy(array.transpose(2, 0, 1).copy())


def _decode_png(path: Path) -> np.ndarray:
    """An 8-bit, non-interlaced PNG without a palette as (H, W, C): the format CIFAR-10's PNG exports use."""
    raw = path.read_bytes()
    if raw[:8] != b"\x89PNG\r\n\x1a\n":
        raise UsageError(f"{path}: without Pillow only PNG files can be read (install Pillow for other formats)")
    pos, idat, header = 8, [], b""
    while pos < len(raw):
        (length,) = struct.unpack(">I", raw[pos : pos + 4])
        kind, body = raw[pos + 4 : pos + 8], raw[pos + 8 : pos + 8 + length]
        header = body if kind == b"IHDR" else header
        idat += [body] if kind == b"IDAT" else []
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    if depth != 8 or colour not in _CHANNELS or interlace:
        raise UsageError(f"{path}: an 8-bit non-interlaced PNG without a palette is needed without Pillow")
    c = _CHANNELS[colour]
    rows = np.frombuffer(zlib.decompress(b"".join(idat)), np.uint8).reshape(height, 1 + width * c)
    return _unfilter(rows, c).reshape(height, width, c)


def _unfilter(rows: np.ndarray, bpp: int) -> np.ndarray:
    """Undo PNG's per-row filters (None, Sub, Up, Average, Paeth)."""
    out = np.zeros((rows.shape[0], rows.shape[1] - 1), np.int32)
    prev = np.zeros(out.shape[1], np.int32)
    for y, (kind, line) in enumerate(zip(rows[:, 0], rows[:, 1:].astype(np.int32), strict=True)):
        if kind in (0, 2):
            cur = (line + (prev if kind == 2 else 0)) & 255
        else:
            cur = line.copy()
            for x in range(cur.size):
                a = cur[x - bpp] if x >= bpp else 0
                c = prev[x - bpp] if x >= bpp else 0
                pred = {1: a, 3: (a + prev[x]) // 2, 4: _paeth(a, prev[x], c)}[int(kind)]
                cur[x] = (cur[x] + pred) & 255
        out[y], prev = cur, cur
    return out.astype(np.uint8)


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def scan(root: Path, split: str, classes: list[str] | None = None) -> tuple[list[Path], list[int], list[str]]:
    """(files, labels, classes) of ``root/split/<class>/*``; the classes come from ``train``."""
    folder = root / split
    if not folder.is_dir():
        raise UsageError(f"--dataset imagefolder: no {folder} (expected {root}/train/<class>/… and test/<class>/…)")
    classes = classes or sorted(p.name for p in folder.iterdir() if p.is_dir())
    files, labels = [], []
    for label, name in enumerate(classes):
        found = sorted(p for p in (folder / name).glob("*") if p.suffix.lower() in SUFFIXES)
        files += found
        labels += [label] * len(found)
    if not files:
        raise UsageError(f"--dataset imagefolder: no image files ({', '.join(SUFFIXES)}) in {folder}/<class>/")
    return files, labels, classes
