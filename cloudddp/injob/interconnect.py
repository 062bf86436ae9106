"""The interconnect pre-flight: before the program starts, every rank takes part in a short all-reduce sweep that
measures the bus bandwidth per message size and finds the transport NCCL actually picked, so a job whose size was
chosen for its InfiniBand or EFA and runs over TCP sockets stops in seconds instead of training at a tenth of the speed.

Shipped in every code snapshot as ``_cloudddp_interconnect.py``. The rank launcher (:mod:`cloudddp.injob.shim`)
calls :func:`check` when the job carries ``CLOUDDDP_PREFLIGHT`` (``<fabric>[:<Gb/s>]``: the fabric the plan chose the
size for, or ``any``), and :func:`check` runs this file as a program of its own, in the rank's environment, with the
job's Python: torch is imported there, never in the launcher, and whatever the sweep leaves behind (NCCL's
communicators, CUDA's context, the store's connection) ends with that process, before the program starts.

- **Where the ranks meet.** Under torchrun the ranks share the agent's store (``TORCHELASTIC_USE_AGENT_STORE``:
  ``MASTER_ADDR:MASTER_PORT`` is a TCPStore server the node-0 agent runs for the whole job, and torch's own
  ``_create_c10d_store`` connects to it as a client). The sweep's process group lives under its own prefix in it
  (``cloudddp-preflight/<run id>/<restart>``); the program's ``init_process_group`` keeps its keys under
  ``default_pg``, so neither sees the other's. Without an agent store (an MPI launch, Azure ML's per-process
  launch) rank 0's sweep serves a store on ``MASTER_PORT`` itself and closes it before any program starts: each
  other rank waits until the server has gone, so no program can reach the pre-flight's store instead of rank 0's.
- **Bus bandwidth**, as nccl-tests defines it for an all-reduce (``doc/PERFORMANCE.md``): ``busbw = S/t ·
  2(n-1)/n`` for ``S`` bytes on ``n`` ranks, ``t`` the slowest rank's time per call: comparable with the hardware's
  link rate whatever the rank count. NCCL on GPUs (1 MiB to 1 GiB), gloo on CPUs (1 MiB, 16 MiB).
- **The transport** is read from NCCL's own log (``NCCL_DEBUG=INFO``, ``NCCL_DEBUG_SUBSYS=INIT,NET`` into a file
  of its own, for the sweep alone: :func:`network_of`), after the first all-reduce has made the connections;
  when a size chosen for InfiniBand/EFA runs over sockets the sweep stops there.

What it prints: global rank 0 says one plan-vs-reality line (:data:`TAG`: ``chosen for 400 Gb/s InfiniBand; NCCL
uses NET/IB; 2 nodes busbw 182 GB/s at 1 GiB (...)``) and one metric record; a size chosen for InfiniBand/EFA that runs
over sockets ends every rank with :data:`EXIT_CODE`, rank 0 having said :data:`FAILED` and the NCCL lines that prove it.
A sweep that cannot finish (no torch, a rank that never came) is said and the job goes on: the program would meet
the same trouble and cloudddp's own watch of it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, NamedTuple

SHIPPED_AS = "_cloudddp_interconnect.py"
SETTING = "CLOUDDDP_PREFLIGHT"
"""The job's variable that turns the pre-flight on: ``infiniband:400``, ``efa:3200`` or ``any``."""
TAG = "cloudddp: interconnect:"
"""Rank 0's line of what the pre-flight found."""
FAILED = "cloudddp: interconnect failed:"
"""The line a job stopped by its pre-flight says (an infrastructure failure: the hosts' fabric is not in use)."""
EXIT_CODE = 69
"""What every rank of a job stopped by its pre-flight ends with (``EX_UNAVAILABLE`` of sysexits.h)."""
RESULT = "CLOUDDDP_PREFLIGHT_RESULT "
METRIC = "CLOUDDDP_METRIC "
"""A metric line's prefix, as :data:`cloudddp.observe.metrics.PREFIX` (a test keeps the two in step)."""
GPU_SIZES = (1 << 20, 16 << 20, 256 << 20, 1 << 30)
CPU_SIZES = (1 << 20, 16 << 20)
WARMUP, ITERATIONS = 2, 5
FABRICS = {"infiniband": "InfiniBand", "efa": "EFA"}
SOCKET_PROVIDERS = ("tcp", "sockets", "udp")
"""libfabric providers that are TCP/UDP sockets underneath (aws-ofi-nccl logs the same plugin name over them)."""

CHANNEL = re.compile(r"\bvia (?:NET/(?P<net>[^/\r\n]+)/|(?P<local>P2P|SHM)/)")
USING = re.compile(r"NCCL INFO Using network (?P<net>[^\r\n]+?)\s*$")
PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is (?P<provider>[\w;+-]+)")
IB_UP = re.compile(r"NCCL INFO NET/IB : Using \[")


class Network(NamedTuple):
    """The transport one rank's NCCL picked between nodes, as its log says (a named tuple: the launcher loads this
    file without registering it as a module, where a dataclass cannot be made)."""

    kind: str
    """``infiniband``, ``efa``, ``libfabric`` (another provider), ``socket``, ``intra-node`` (P2P/SHM only),
    ``tcp`` (gloo) or ``unknown``."""
    label: str
    """How NCCL names it: ``NET/IB``, ``NET/Socket``, ``NET/AWS Libfabric (efa)``..."""
    evidence: tuple[str, ...] = ()
    """The log lines that decided it (a few)."""


def kind_of(net: str, provider: str | None) -> str:
    """The kind of NCCL's network ``net`` (``IB``, ``IBext_v8``, ``Socket``, ``AWS Libfabric``...) over the libfabric
    ``provider`` the OFI plugin selected, if it said."""
    if net.startswith("IB"):  # NCCL's own verbs transport (RoCE too) and the SHARP plugin's IBext
        return "infiniband"
    if net == "Socket":
        return "socket"
    if "Libfabric" in net or net.startswith("OFI"):
        chosen = (provider or "").split(";")[0].lower()
        if chosen in SOCKET_PROVIDERS:
            return "socket"
        return "efa" if chosen.startswith("efa") else "libfabric"
    return "unknown"


def network_of(text: str) -> Network:
    """The transport in one rank's NCCL log: the networks its channels connect over (``via NET/IB/0``), else the
    network it chose at init (``Using network IB``), else an InfiniBand device it opened; P2P/SHM channels alone
    mean no network at all. ``NET/Socket : Using`` is no evidence: NCCL opens sockets on every host."""
    lines = text.splitlines()
    found = PROVIDER.search(text)
    provider = found.group("provider") if found else None
    said = [line for line in lines if PROVIDER.search(line)][:1]
    for pattern in (CHANNEL, USING):
        named = [(m.group("net"), line) for line in lines if (m := pattern.search(line)) and m.group("net")]
        if named:
            kinds = [kind_of(net, provider) for net, _ in named]
            pick = kinds.index("socket") if "socket" in kinds else 0  # one channel over sockets is the bottleneck
            net, line = named[pick]
            label = f"NET/{net}" + (f" ({provider})" if provider and kinds[pick] != "infiniband" else "")
            return Network(kinds[pick], label, tuple(_clean(x) for x in [*said, line]))
    opened = [line for line in lines if IB_UP.search(line)]
    if opened:
        return Network("infiniband", "NET/IB", (_clean(opened[0]),))
    local = [line for line in lines if (m := CHANNEL.search(line)) and m.group("local")]
    if local:
        return Network("intra-node", "P2P/SHM", (_clean(local[0]),))
    return Network("unknown", "a transport its log does not name")


def _clean(line: str) -> str:
    return line.strip()[:300]


def plan_words(setting: str) -> tuple[str, str]:
    """The fabric the plan chose the size for (``infiniband``, ``efa``; empty for none), and in words."""
    fabric, _, rate = setting.partition(":")
    if fabric not in FABRICS:
        return "", "no fabric chosen by the plan"
    speed = f"{float(rate):g} Gb/s " if rate.replace(".", "", 1).isdigit() and float(rate) > 0 else ""
    return fabric, f"chosen for {speed}{FABRICS[fabric]}"


def sockets_asked(env: Mapping[str, str]) -> str | None:
    """The variable that asks NCCL for sockets on purpose, if one does (the pre-flight then reports, never fails)."""
    if env.get("NCCL_IB_DISABLE", "").strip().lower() in ("1", "true"):
        return "NCCL_IB_DISABLE=1"
    if env.get("NCCL_NET", "").strip().lower() == "socket":
        return f"NCCL_NET={env['NCCL_NET']}"
    if env.get("FI_PROVIDER", "").strip().lower() in SOCKET_PROVIDERS:
        return f"FI_PROVIDER={env['FI_PROVIDER']}"
    return None


def off_fabric(setting: str, nets: Sequence[Mapping[str, Any]], env: Mapping[str, str]) -> list[Mapping[str, Any]]:
    """The ranks whose NCCL runs over sockets on a size chosen for InfiniBand/EFA (none: nothing to stop for)."""
    fabric, _ = plan_words(setting)
    if not fabric or sockets_asked(env):
        return []
    return [net for net in nets if net["kind"] == "socket"]


def ranges(numbers: Sequence[int]) -> str:
    """``0-3, 8``: sorted numbers, runs joined."""
    runs: list[list[int]] = []
    for n in sorted(set(numbers)):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def size_words(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def transport_words(nets: Sequence[Mapping[str, Any]], env: Mapping[str, str]) -> str:
    """``NCCL uses NET/IB``, or which ranks use which, or ``gloo over TCP``."""
    by_label: dict[str, list[int]] = {}
    for net in nets:
        by_label.setdefault(net["label"], []).append(int(net["rank"]))
    if len(by_label) == 1:
        (label,) = by_label
        said = label if label.startswith("gloo") else f"NCCL uses {label}"
    else:
        said = "NCCL uses " + ", ".join(f"{label} on ranks {ranges(r)}" for label, r in by_label.items())
    asked = sockets_asked(env) if any(net["kind"] == "socket" for net in nets) else None
    return said + (f" ({asked} asks for sockets)" if asked else "")


def summary(report: Mapping[str, Any], env: Mapping[str, str]) -> str:
    """Rank 0's plan-vs-reality line."""
    _, plan = plan_words(report["setting"])
    busbw = {int(size): gbs for size, gbs in report["busbw"].items()}
    words = [plan, transport_words(report["nets"], env)]
    if busbw:
        top = max(busbw)
        each = ", ".join(f"{size_words(s)} {_gbs(busbw[s])}" for s in sorted(busbw))
        nodes = f"{report['nodes']} node{'s' if report['nodes'] != 1 else ''}"
        words.append(f"{nodes} busbw {_gbs(busbw[top])} GB/s at {size_words(top)} ({each} GB/s)")
    words.append(f"pre-flight {report['seconds']:.1f} s")
    return f"{TAG} " + "; ".join(words)


def _gbs(value: float) -> str:
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def failure_lines(report: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """What a job stopped by its pre-flight says: the verdict, then each failing rank's NCCL lines."""
    fabric, plan = plan_words(report["setting"])
    bad = off_fabric(report["setting"], report["nets"], env)
    hosts = sorted({str(net["host"]) for net in bad})
    lines = [
        f"{FAILED} {plan} but NCCL uses NET/Socket on ranks {ranges([int(n['rank']) for n in bad])} "
        f"(hosts {', '.join(hosts)}): the hosts' {FABRICS[fabric]} is not in use; the job stops before training"
    ]
    for net in bad[:4]:
        lines += [f"{TAG} rank {net['rank']} on {net['host']}: {line}" for line in net["evidence"]]
    return lines


def metric_line(report: Mapping[str, Any]) -> str:
    """The pre-flight as one metric record: its seconds and the bus bandwidth (GB/s) per size."""
    values: dict[str, Any] = {"step": None, "epoch": None, "time": round(time.time(), 3)}
    values["interconnect_seconds"] = round(report["seconds"], 3)
    for size, gbs in sorted(report["busbw"].items(), key=lambda kv: int(kv[0])):
        values[f"interconnect_busbw_{size_words(int(size)).replace(' ', '')}"] = round(gbs, 3)
    return METRIC + json.dumps(values, separators=(",", ":"))


def check(python: str, tag: str = "") -> int | None:
    """Run this rank's part of the pre-flight (``python`` runs it: the job's own); print what rank 0 found. The code
    the launcher must end with (:data:`EXIT_CODE`, or ``-N`` for a signal that ended the sweep), or None: start the
    program."""
    if int(os.environ.get("WORLD_SIZE") or 1) < 2:
        return None
    folder = tempfile.mkdtemp(prefix="cloudddp-nccl-")
    env = {**os.environ, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "NCCL_DEBUG_FILE": f"{folder}/%h.%p"}
    limit = float(os.environ.get("CLOUDDDP_COLLECTIVE_TIMEOUT") or 600) + 120
    started = time.monotonic()
    try:
        done = subprocess.run([python, str(Path(__file__).resolve())], env=env, capture_output=True, timeout=limit)
    except subprocess.TimeoutExpired:
        _gone_on(tag, f"it did not finish in {limit:.0f} s")
        return None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if done.returncode < 0:  # a stop reached the sweep: end as it did
        return done.returncode
    out = done.stdout.decode(errors="replace").splitlines()
    found = [line[len(RESULT) :] for line in out if line.startswith(RESULT)]
    if not found:
        errors = [line for line in done.stderr.decode(errors="replace").splitlines() if line.strip()]
        _gone_on(tag, errors[-1].strip() if errors else f"exit code {done.returncode}")
        return None
    result = json.loads(found[-1])
    report = result.get("report")
    if report is not None:  # global rank 0: its seconds are what the job paid, torch's start included
        report["seconds"] = time.monotonic() - started
        if result["go"]:
            _say(tag, [summary(report, os.environ), metric_line(report)])
        else:
            _say(tag, failure_lines(report, os.environ), sys.stderr)
    return None if result["go"] else EXIT_CODE


def _gone_on(tag: str, why: str) -> None:
    _say(tag, [f"{TAG} the pre-flight could not finish ({why}); the job goes on without it"], sys.stderr)


def _say(tag: str, lines: Sequence[str], stream: Any = None) -> None:
    sink = stream or sys.stdout
    sink.write("".join(f"{tag}{line}\n" for line in lines))
    sink.flush()


# -- the sweep, in a process of its own (torch imported here only) -----------------------------------------------


def _stores(dist: Any, rank: int, world: int, timeout: timedelta) -> tuple[Any, Any, bool]:
    """The store the sweep's process group lives in, the connection under it, and whether this process serves it
    (rank 0 where no launcher's agent store is there to share)."""
    shared = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True)
    serve = not shared and rank == 0
    addr, port = os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ.get("MASTER_PORT") or 29500)
    base = dist.TCPStore(addr, port, world_size=None, is_master=serve, timeout=timeout, wait_for_workers=False)
    run = os.environ.get("TORCHELASTIC_RUN_ID", "job")
    prefix = f"cloudddp-preflight/{run}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    return dist.PrefixStore(prefix, base), base, serve


def _seconds_per_call(torch: Any, dist: Any, size: int, device: Any, calls: int) -> float:
    """The slowest rank's seconds per all-reduce of ``size`` bytes, over ``calls`` calls."""
    tensor = torch.ones(size // 4, dtype=torch.float32, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(tensor)
    sync()
    slowest = torch.tensor([(time.perf_counter() - start) / calls], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return float(slowest.item())


def _own_network(gpu: bool) -> Network:
    if not gpu:
        return Network("tcp", "gloo over TCP")
    folder = Path(os.environ["NCCL_DEBUG_FILE"]).parent
    return network_of("\n".join(p.read_text(errors="replace") for p in sorted(folder.glob(f"*.{os.getpid()}"))))


def sweep() -> dict[str, Any]:
    """This rank's part of the pre-flight: join, make the connections, agree whether to go on, measure."""
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    timeout = timedelta(seconds=float(os.environ.get("CLOUDDDP_COLLECTIVE_TIMEOUT") or 600))
    store, base, serving = _stores(dist, rank, world, timeout)
    gpu = torch.cuda.is_available() and os.environ.get("CLOUDDDP_DIST_BACKEND", "nccl") != "gloo"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK") or 0)) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if gpu else "gloo", store=store, rank=rank, world_size=world, timeout=timeout)
    sizes = GPU_SIZES if gpu else CPU_SIZES
    _seconds_per_call(torch, dist, sizes[0], device, 1)  # the connections are made: NCCL has said its transport
    node = os.environ.get("GROUP_RANK") or os.uname().nodename
    store.set(f"net/{rank}", json.dumps({"rank": rank, "host": os.uname().nodename, "node": node, **_fields(gpu)}))
    nets = [json.loads(store.get(f"net/{r}")) for r in range(world)] if rank == 0 else []
    setting = os.environ.get(SETTING, "any")
    if rank == 0:
        store.set("go", "0" if off_fabric(setting, nets, os.environ) else "1")
    go = store.get("go") == b"1"
    busbw: dict[int, float] = {}
    for size in sizes if go else ():
        _seconds_per_call(torch, dist, size, device, WARMUP)
        busbw[size] = size * 2 * (world - 1) / world / _seconds_per_call(torch, dist, size, device, ITERATIONS) / 1e9
    dist.destroy_process_group()
    _part(store, base, world, serving)
    nodes = int(os.environ.get("CLOUDDDP_NUM_NODES") or len({net["node"] for net in nets}) or 1)
    report = {"setting": setting, "nets": nets, "busbw": busbw, "nodes": nodes, "seconds": 0.0}
    return {"go": go, **({"report": report} if rank == 0 else {})}


def _fields(gpu: bool) -> dict[str, Any]:
    found = _own_network(gpu)._asdict()
    found["evidence"] = list(found["evidence"])
    return found


def _part(store: Any, base: Any, world: int, serving: bool) -> None:
    """Leave the store so that its server (where this sweep serves one) closes before any program starts: every rank
    counts itself out; the server waits for all of them, the others until the server has gone."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True):
        return
    store.add("out", 1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if serving and store.add("out", 0) >= world:
                return
            if not serving:
                base.check(["cloudddp-preflight-gone"])
        except Exception:  # noqa: BLE001 - the server has gone: what the other ranks wait for
            return
        time.sleep(0.05)


def main() -> None:
    result = sweep()
    print(RESULT + json.dumps(result, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()
