"""A faithful re-implementation of the seed documents' reference DDP script, for the throughput ratio.

What it keeps from the seed: the ImageNet-stem ResNet-18 with a 1000-class head (the same network
class as src_train's ``resnet18-imagenet``, so the ratio measures the input pipeline and the loop),
a DataLoader whose workers apply per-sample transforms (RandomCrop(32, padding=4), horizontal flip,
ToTensor, Normalize — written with numpy because torchvision does not import here), a
DistributedSampler whose ``set_epoch`` is never called, SGD(lr, momentum 0.9, weight decay 1e-5),
fp32, ``cudnn.deterministic=True`` / ``benchmark=False``. It prints its images/s as a metric line.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src_train"))
from ddptrain import data as datasets
from ddptrain import metrics, models

MEAN = np.array([0.4914, 0.4822, 0.4465], dtype=np.float32).reshape(3, 1, 1)
STD = np.array([0.2023, 0.1994, 0.2010], dtype=np.float32).reshape(3, 1, 1)


class SeedTransforms(Dataset):
    """Per-sample CPU transforms, one image at a time, as torchvision.transforms.Compose would apply them."""

    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        img = self.images[i]  # uint8 (3, 32, 32)
        padded = np.pad(img, ((0, 0), (4, 4), (4, 4)))
        y, x = np.random.randint(0, 9, size=2)
        img = padded[:, y : y + 32, x : x + 32]
        if np.random.rand() < 0.5:
            img = img[:, :, ::-1]
        tensor = (img.astype(np.float32) / 255.0 - MEAN) / STD  # ToTensor + Normalize
        return torch.from_numpy(np.ascontiguousarray(tensor)), int(self.labels[i])


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--max-steps", type=int, default=20)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--synthetic-size", type=int, default=5000)
    p.add_argument("--model", default="resnet18-imagenet")
    args = p.parse_args()
    torch.manual_seed(0)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    ds = datasets.load_synthetic(args.synthetic_size, 0)
    model = models.build(args.model, 3, 10).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    sampler = DistributedSampler(SeedTransforms(ds.train_x.numpy(), ds.train_y.numpy()))
    loader = DataLoader(sampler.dataset, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-5)
    criterion = torch.nn.CrossEntropyLoss()
    ddp.train()
    seen, step, began = 0, 0, time.perf_counter()
    while step < args.max_steps:
        for images, labels in loader:  # sampler.set_epoch is never called, as in the seed
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad()
            loss = criterion(ddp(images), labels)
            loss.backward()
            optimizer.step()
            seen += len(labels) * dist.get_world_size()
            step += 1
            if step >= args.max_steps:
                break
    if cuda:
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - began
    if dist.get_rank() == 0:
        metrics.emit(step, 1, images_per_sec=seen / elapsed, epoch_time=elapsed)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
