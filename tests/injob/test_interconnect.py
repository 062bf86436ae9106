"""The interconnect pre-flight's judgement: NCCL's transport read from real NCCL INFO logs (their sources:
tests/fixtures/nccl/SOURCES.md), the line rank 0 says, the metric record, and a size chosen for InfiniBand that runs
over sockets stopping every rank (the transport stubbed, the rest real: two processes, a store, gloo)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cloudddp.injob import interconnect, shim
from cloudddp.injob.interconnect import (
    EXIT_CODE,
    FAILED,
    TAG,
    failure_lines,
    metric_line,
    network_of,
    off_fabric,
    summary,
)
from cloudddp.observe.metrics import PREFIX, parse_metric_line
from tests.support.cli import FIXTURES
from tests.support.ports import free_port

LOGS = FIXTURES / "nccl"


@pytest.mark.parametrize(
    ("log", "kind", "label"),
    [
        ("ib_ibext_v8.log", "infiniband", "NET/IBext_v8"),
        ("ib_roce.log", "infiniband", "NET/IB"),
        ("ib_channels.log", "infiniband", "NET/IBext_v8"),
        ("ib_init_only.log", "infiniband", "NET/IB"),
        ("efa.log", "efa", "NET/AWS Libfabric (efa)"),
        ("efa_gdrdma.log", "libfabric", "NET/AWS Libfabric"),
        ("libfabric_ring.log", "libfabric", "NET/AWS Libfabric"),
        ("socket.log", "socket", "NET/Socket"),
        ("socket_on_ib_cluster.log", "socket", "NET/Socket"),
        ("intra_node.log", "intra-node", "P2P/SHM"),
    ],
)
def test_real_nccl_logs_are_classified_by_the_network_nccl_connected_over(log: str, kind: str, label: str) -> None:
    found = network_of((LOGS / log).read_text())
    assert (found.kind, found.label) == (kind, label)
    assert found.evidence and all(line in (LOGS / log).read_text() for line in found.evidence)


def test_an_ofi_plugin_over_libfabrics_tcp_provider_is_sockets() -> None:
    efa = (LOGS / "efa.log").read_text()
    over_tcp = efa.replace("Selected Provider is efa (found 1 nics)", "Selected provider is tcp, fabric is 10.0.0.0/16")
    assert network_of(over_tcp).kind == "socket"
    assert network_of("").kind == "unknown"


def nets(log: str, ranks: range, host: str = "node-1") -> list[dict[str, Any]]:
    found = network_of((LOGS / log).read_text())
    return [
        {"rank": r, "host": host, "kind": found.kind, "label": found.label, "evidence": found.evidence} for r in ranks
    ]


def report(setting: str, ranks: list[dict[str, Any]], busbw: dict[int, float] | None = None) -> dict[str, Any]:
    return {"setting": setting, "nets": ranks, "busbw": busbw or {}, "nodes": 2, "seconds": 6.25}


def test_rank_zero_says_plan_against_reality_with_the_bus_bandwidth_per_size() -> None:
    done = report("infiniband:400", nets("ib_roce.log", range(16)), {1 << 20: 12.14, 16 << 20: 80.2, 1 << 30: 182.4})
    assert summary(done, {}) == (
        f"{TAG} chosen for 400 Gb/s InfiniBand; NCCL uses NET/IB; 2 nodes busbw 182 GB/s at 1 GiB "
        "(1 MiB 12.1, 16 MiB 80.2, 1 GiB 182 GB/s); pre-flight 6.2 s"
    )
    record = parse_metric_line(metric_line(done))
    assert record is not None and metric_line(done).startswith(PREFIX)
    assert record.values == {
        "interconnect_seconds": 6.25,
        "interconnect_busbw_1MiB": 12.14,
        "interconnect_busbw_16MiB": 80.2,
        "interconnect_busbw_1GiB": 182.4,
    }


def test_sockets_on_a_size_chosen_for_infiniband_fail_with_the_lines_that_prove_it() -> None:
    ranks = nets("ib_roce.log", range(8), "node-0") + nets("socket_on_ib_cluster.log", range(8, 16), "node-1")
    done = report("infiniband:400", ranks)
    assert [n["rank"] for n in off_fabric("infiniband:400", ranks, {})] == list(range(8, 16))
    lines = failure_lines(done, {})
    assert lines[0].startswith(
        f"{FAILED} chosen for 400 Gb/s InfiniBand but NCCL uses NET/Socket on ranks 8-15 (hosts node-1)"
    )
    assert (
        f"{TAG} rank 8 on node-1: <cluster_name>:926:1151 [7] NCCL INFO Channel 03/0 : 15[7] -> 6[6] [send] via "
        "NET/Socket/3" in lines
    )
    assert "NET/IB on ranks 0-7, NET/Socket on ranks 8-15" in summary(done, {})


def test_efa_over_efa_and_sockets_asked_for_on_purpose_do_not_fail() -> None:
    assert off_fabric("efa:3200", nets("efa.log", range(2)), {}) == []
    sockets = nets("socket.log", range(2))
    assert off_fabric("any", sockets, {}) == []  # no fabric chosen: measured and said, never stopped
    assert off_fabric("infiniband:200", sockets, {"NCCL_IB_DISABLE": "1"}) == []
    assert "(NCCL_IB_DISABLE=1 asks for sockets)" in summary(
        report("infiniband:200", sockets), {"NCCL_IB_DISABLE": "1"}
    )


STUB = """import importlib.util, sys
spec = importlib.util.spec_from_file_location("stubbed", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
module._own_network = lambda gpu: module.network_of(open({log!r}).read())  # the transport NCCL would report
module.main()
"""


def test_every_rank_stops_fast_when_the_transport_is_sockets_on_an_infiniband_size(tmp_path: Path) -> None:
    (tmp_path / "stub.py").write_text(STUB.format(log=str(LOGS / "socket_on_ib_cluster.log")))
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {tmp_path / "stub.py"} "$@"\n')
    python.chmod(0o755)
    port = str(free_port())
    call = f"import sys; from cloudddp.injob import interconnect as i; sys.exit(i.check({str(python)!r}) or 0)"
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", call],
            env={
                **os.environ,
                "RANK": str(r),
                "WORLD_SIZE": "2",
                "LOCAL_RANK": "0",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
                "CLOUDDDP_PREFLIGHT": "infiniband:400",
                "CLOUDDDP_COLLECTIVE_TIMEOUT": "60",
                "CLOUDDDP_DIST_BACKEND": "gloo",
                "CLOUDDDP_NUM_NODES": "2",
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    done = [p.communicate(timeout=120) for p in ranks]
    assert [p.returncode for p in ranks] == [EXIT_CODE, EXIT_CODE], done
    said = done[0][1].splitlines()
    assert said[0].startswith(f"{FAILED} chosen for 400 Gb/s InfiniBand but NCCL uses NET/Socket on ranks 0-1"), said
    assert any("via NET/Socket/3" in line for line in said[1:]), said
    assert not done[1][1].strip() and TAG not in done[0][0], done  # rank 0 alone says it; nothing measured
    assert "pre-flight 0" not in done[0][0]


def test_the_launcher_ends_with_the_preflights_code_before_the_program(monkeypatch: pytest.MonkeyPatch) -> None:
    class Stopped:
        @staticmethod
        def check(python: str, tag: str) -> int:
            return EXIT_CODE

    monkeypatch.setattr(shim, "shipped", lambda name, module: Stopped if name == shim.INTERCONNECT_AS else None)
    with pytest.raises(SystemExit) as ended:
        shim.preflight(sys.executable, "", shim.StopForwarder(platform=True))
    assert ended.value.code == EXIT_CODE
    assert shim.PREFLIGHT == interconnect.SETTING


def test_the_shipped_launcher_loads_the_preflight_and_the_mpi_variables_from_beside_itself(tmp_path: Path) -> None:
    from cloudddp.runtime import shipped_files

    for name, data in shipped_files().items():
        (tmp_path / name).write_bytes(data)
    call = (
        "import _cloudddp_launch as launch\n"
        "pre = launch.shipped(launch.INTERCONNECT_AS, 'none')\n"
        f"print(pre.network_of(open({str(LOGS / 'efa.log')!r}).read()).label)\n"
        "mpi = launch.shipped(launch.MPI_AS, 'none')\n"
        "print(mpi.mpi_environment({'OMPI_COMM_WORLD_RANK': '1'})['RANK'])\n"
    )
    done = subprocess.run([sys.executable, "-c", call], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert done.stdout.splitlines() == ["NET/AWS Libfabric (efa)", "1"], done.stderr
