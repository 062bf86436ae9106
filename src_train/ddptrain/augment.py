"""Batched augmentation on the device: one gather for random translation, one where() for flips.

This replaces per-sample PIL transforms in DataLoader workers (the seed script's bottleneck). Every
random draw comes from a generator seeded by (seed, epoch, step, rank), so a restarted run makes the
same draws as an uninterrupted one without saving generator state.
"""

from __future__ import annotations

import torch


def step_generator(device: torch.device, seed: int, epoch: int, step: int, rank: int) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(((seed * 1_000_003 + epoch) * 1_000_003 + step) * 1009 + rank)
    return g


def translate_flip(x: torch.Tensor, pad: int, flip: bool, g: torch.Generator) -> torch.Tensor:
    """Random translate by up to ``pad`` pixels (zero padding, like RandomCrop(padding=pad)) and flip."""
    n, c, h, w = x.shape
    if pad > 0:
        padded = torch.nn.functional.pad(x, (pad, pad, pad, pad))
        dy = torch.randint(0, 2 * pad + 1, (n,), device=x.device, generator=g)
        dx = torch.randint(0, 2 * pad + 1, (n,), device=x.device, generator=g)
        rows = (dy[:, None] + torch.arange(h, device=x.device)[None, :])[:, None, :, None]
        cols = (dx[:, None] + torch.arange(w, device=x.device)[None, :])[:, None, None, :]
        batch = torch.arange(n, device=x.device)[:, None, None, None]
        chans = torch.arange(c, device=x.device)[None, :, None, None]
        x = padded[batch, chans, rows, cols]
    if flip:
        mask = torch.rand(n, device=x.device, generator=g) < 0.5
        x = torch.where(mask[:, None, None, None], x.flip(3), x)
    return x


def normalize(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return ((x.to(dtype) / 255.0) - mean) / std
