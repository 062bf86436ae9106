"""Process-group set-up from whatever launched us: torchrun, Azure ML, SageMaker, MPI, or nothing.

torchrun (and Azure ML's PyTorch distribution, SageMaker's torchrun launcher) set RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT. MPI launchers (Azure ML's MPI distribution, SageMaker's
smddp launcher) set OMPI_COMM_WORLD_*; those are mapped to the same names. With none of them the
script runs as a single process without a process group.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


class UsageError(Exception):
    """A mistake in arguments or environment: printed as one line, exit code 2."""


@dataclass(frozen=True)
class Context:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    device: torch.device
    backend: str | None  # None: single process, no process group

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.backend is not None


def _map_mpi_env() -> None:
    env = os.environ
    if "RANK" in env or "OMPI_COMM_WORLD_RANK" not in env:
        return
    env["RANK"] = env["OMPI_COMM_WORLD_RANK"]
    env["WORLD_SIZE"] = env["OMPI_COMM_WORLD_SIZE"]
    env["LOCAL_RANK"] = env.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")
    env.setdefault("LOCAL_WORLD_SIZE", env.get("OMPI_COMM_WORLD_LOCAL_SIZE", "1"))
    # Azure ML's MPI distribution: AZ_BATCH_MASTER_NODE=addr:port on several nodes,
    # AZ_BATCHAI_MPI_MASTER_NODE=addr on one (its distributed-training guide).
    addr, _, port = env.get("AZ_BATCH_MASTER_NODE", "").partition(":")
    env.setdefault("MASTER_ADDR", addr or env.get("AZ_BATCHAI_MPI_MASTER_NODE", "127.0.0.1"))
    env.setdefault("MASTER_PORT", port or "29500")


def cpu_threads(local_world: int) -> int:
    """The CPUs this process may use: those it is allowed to run on (its affinity: a cgroup or Slurm's binding
    may have narrowed it) shared with the local processes that inherited the same set, and no more than Slurm
    gave its task (SLURM_CPUS_PER_TASK, which is what it asked for when nothing binds). Under srun with one
    task per process, each task is one process; under torchrun, a node's processes share one task."""
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    tasks, nodes = os.environ.get("SLURM_STEP_NUM_TASKS", ""), os.environ.get("SLURM_STEP_NUM_NODES", "")
    per_node_tasks = max(1, int(tasks) // int(nodes)) if tasks.isdigit() and nodes.isdigit() and int(nodes) else 1
    sharing = max(1, local_world // per_node_tasks)
    threads = allowed // sharing
    given = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if given.isdigit() and int(given) > 0:
        threads = min(threads, int(given) // sharing)
    return max(1, threads)


def setup(backend: str, device: str, timeout_s: float) -> Context:
    _map_mpi_env()
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    use_cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
    if use_cuda and not torch.cuda.is_available():
        raise UsageError("--device cuda but CUDA is not available here")
    if use_cuda:
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        dev = torch.device("cuda", torch.cuda.current_device())
    else:
        dev = torch.device("cpu")
    torch.set_num_threads(cpu_threads(local_world))
    if backend == "auto":
        backend = "nccl" if use_cuda else "gloo"
    if backend == "nccl" and not use_cuda:
        raise UsageError("--dist-backend nccl needs CUDA GPUs; use gloo on CPU")
    if world == 1 and "MASTER_ADDR" not in os.environ:
        return Context(0, 0, 1, 1, dev, None)
    if backend == "smddp":
        try:
            import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401  (registers the backend)
        except ImportError:
            raise UsageError(
                "--dist-backend smddp needs the SageMaker data-parallel library, which only SageMaker's "
                "PyTorch training containers ship; use nccl elsewhere"
            ) from None
    timeout = datetime.timedelta(seconds=timeout_s)
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if restart is not None and backend != "smddp":
        # After a torchrun restart the agent's store still holds the previous attempt's keys; a slow
        # peer lets a fast one read its old, dead address. A prefix per attempt keeps attempts apart.
        agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
        base = dist.TCPStore(
            os.environ["MASTER_ADDR"],
            int(os.environ["MASTER_PORT"]),
            world,
            is_master=not agent_store and rank == 0,
            timeout=timeout,
        )
        store = dist.PrefixStore(f"cloudddp/attempt_{restart}", base)
        dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world, timeout=timeout)
    else:
        dist.init_process_group(backend=backend, init_method="env://", timeout=timeout)
    return Context(dist.get_rank(), local_rank, dist.get_world_size(), local_world, dev, backend)


def all_sum(ctx: Context, values: torch.Tensor) -> torch.Tensor:
    """Sum a small tensor over ranks (in place when distributed)."""
    if ctx.distributed:
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def broadcast_object(ctx: Context, obj: object) -> object:
    """Rank 0's ``obj`` on every rank (checkpoint state on resume: no shared filesystem needed)."""
    if not ctx.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0, device=ctx.device if ctx.device.type == "cuda" else None)
    return box[0]


def teardown(ctx: Context) -> None:
    """Leave together: a rank that destroys its group while a peer still writes files can abort the peer."""
    if ctx.distributed and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
