"""A DDP script of your own (`cloudddp init` writes it): replace the model and the made-up data with yours."""

import argparse
import datetime
import gc
import json
import os
import signal
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

stop_asked = False  # SIGTERM (a cancel, a spot reclaim, the time limit): checkpoint and exit 0


def on_sigterm(signum: int, frame: object) -> None:
    global stop_asked  # noqa: PLW0603 - all a signal handler should do is leave a flag
    stop_asked = True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, on_sigterm)
    # A rank that stops taking part fails the others after this timeout instead of hanging the job.
    timeout = datetime.timedelta(seconds=float(os.environ.get("CLOUDDDP_COLLECTIVE_TIMEOUT", "600")))
    dist.init_process_group(os.environ.get("CLOUDDDP_DIST_BACKEND", "gloo"), timeout=timeout)
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if torch.cuda.is_available() else torch.device("cpu")

    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(16, 1).to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    checkpoint = Path(os.environ.get("CLOUDDDP_CHECKPOINT_DIR", "checkpoints")) / "last.pt"
    first = 0
    if checkpoint.exists() and os.environ.get("CLOUDDDP_RESUME", "auto") == "auto":
        state = torch.load(checkpoint, map_location=device, weights_only=True)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        first = state["epoch"] + 1

    data = torch.Generator().manual_seed(rank)  # each rank its own shard of the data
    for epoch in range(first, args.epochs):
        for _ in range(20):
            x = torch.randn(64, 16, generator=data).to(device)
            loss = nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        stopping = torch.tensor([float(stop_asked)], device=device)
        dist.all_reduce(stopping)  # every rank learns that one of them was asked to stop
        if rank == 0:  # one writer; write, then rename: a checkpoint is never half written
            checkpoint.parent.mkdir(parents=True, exist_ok=True)
            saved = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
            torch.save(saved, checkpoint.with_suffix(".tmp"))
            os.replace(checkpoint.with_suffix(".tmp"), checkpoint)
            print("CLOUDDDP_METRIC " + json.dumps({"epoch": epoch + 1, "loss": loss.item()}), flush=True)
        if stopping.item():
            break

    if rank == 0:
        model_dir = Path(os.environ.get("CLOUDDDP_MODEL_DIR", "model"))
        model_dir.mkdir(parents=True, exist_ok=True)
        torch.save(model.module.state_dict(), model_dir / "model.pt")
    # Every rank waits here until rank 0 has saved: a rank that exited first could end the job (Slurm's srun, a
    # launcher) while rank 0 still writes.
    dist.barrier()
    del model, optimizer  # free DDP (it sits in reference cycles) before its process group ends
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
